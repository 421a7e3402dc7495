"""What pricing an exchange costs, beside what analysing it costs and beside genai-prices'
own ``calc_price`` on the same usage.

    python -m bench.bench_cost [--rounds 200]

The exchanges are the real provider streams of tests/data/real_streams (70: OpenAI, Azure,
Anthropic, OpenRouter, Groq, DeepSeek, Bedrock, Ollama, Cohere, Gemini, Vertex, Mistral, ...),
each analysed once as the recording process does;
then, per exchange:

- "analysis": reading the stream's events (what the recording process does per exchange);
- "price": ``PriceBook.price`` (ssetape's pricing: provider by host, profile or model, the
  counts mapped, the rates of the day);
- "calc_price": genai-prices' ``calc_price`` alone on the same usage, model and URL (the
  peer: what pricing would cost without ssetape around it).

Printed: microseconds per exchange for each, and price / calc_price and price / analysis as
ratios. Loading the price data happens once per process (reported apart).
"""

from __future__ import annotations

import argparse
import datetime as dt
import time
from collections.abc import Callable
from pathlib import Path

import genai_prices

from ssetape.analysis.analyzer import Analysis, Analyzer
from ssetape.analysis.knowledge import price_query
from ssetape.analysis.profiles import profile_for
from ssetape.cost.price_book import PriceBook, PriceQuery
from ssetape.framing.framings import FRAMINGS, framing_of

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "data" / "real_streams"
AT = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)


def _streams() -> list[tuple[dict[str, object], list[tuple[str | None, str | None]]]]:
    import orjson

    out = []
    for meta_file in sorted(CORPUS.glob("*.json")):
        meta = orjson.loads(meta_file.read_bytes())
        body = (CORPUS / meta.get("body_file", f"{meta['name']}.sse")).read_bytes()
        headers = meta["response_headers"]
        if headers.get("content-encoding") == "gzip":
            import gzip

            body = gzip.decompress(body)
        # Cut as the recorder cuts it: SSE events, AWS event-stream frames, NDJSON lines.
        parser = FRAMINGS[framing_of(headers.get("content-type"))].parser(1 << 30)
        events = [(e.type, e.data) for e in [*parser.feed(body), *parser.close()]]
        out.append((meta, events))
    return out


def _analyse(meta: dict[str, object], events: list[tuple[str | None, str | None]]) -> Analysis:
    an = Analyzer(method=str(meta["request_method"]), path=str(meta["request_path"]),
                  request_body=str(meta.get("request_body") or "").encode() or None,
                  profile=profile_for(str(meta["original_host"])))  # fmt: skip
    for i, (event, data) in enumerate(events):
        an.feed(i, i * 1000, event, data)
    return an.finish(status=200, state="completed", response_content_type="text/event-stream")


def _timed(fn: Callable[[], object], rounds: int, n: int) -> float:
    """Microseconds per exchange, best of three runs of ``rounds`` passes."""
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(rounds):
            fn()
        best = min(best, time.perf_counter() - t)
    return best / (rounds * n) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=200)
    args = ap.parse_args()
    t = time.perf_counter()
    book = PriceBook.bundled()
    book.price(PriceQuery("chat_completions", "gpt-4o", "https", "api.openai.com", 443, AT,
                          input_tokens=1, output_tokens=1))  # fmt: skip
    load_ms = (time.perf_counter() - t) * 1000
    streams = _streams()
    analyses = [(meta, _analyse(meta, events)) for meta, events in streams]
    queries = [price_query(a, "https", str(meta["original_host"]), 443, AT) for meta, a in analyses]
    priced = [q for q in queries if book.price(q).nusd is not None]
    usages = [(book._usage(q), q) for q in priced]  # the same usage, for the peer

    def analysis() -> None:
        for meta, events in streams:
            _analyse(meta, events)

    def price() -> None:
        for q in priced:
            book.price(q)

    def calc() -> None:
        for usage, q in usages:
            genai_prices.calc_price(usage, q.model or "", provider_api_url=q.url,
                                    genai_request_timestamp=AT)  # fmt: skip

    rounds = args.rounds
    us_analysis = _timed(analysis, max(1, rounds // 20), len(streams))
    us_price = _timed(price, rounds, len(priced))
    us_calc = _timed(calc, rounds, len(priced))
    print(f"genai-prices {genai_prices.__version__}: data loaded in {load_ms:.0f} ms (once)")
    print(f"{len(priced)} of {len(streams)} real streams priced")
    print(f"{'per exchange':<28}{'us':>10}")
    print(f"{'analysis of its events':<28}{us_analysis:>10.1f}")
    print(f"{'ssetape price':<28}{us_price:>10.1f}")
    print(f"{'genai-prices calc_price':<28}{us_calc:>10.1f}")
    print(f"price / calc_price: {us_price / us_calc:.2f}x; price / analysis: "
          f"{us_price / us_analysis:.3f}x")  # fmt: skip


if __name__ == "__main__":
    main()
