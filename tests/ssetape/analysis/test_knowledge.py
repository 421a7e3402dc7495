"""Stream knowledge written by the recorder's writer thread (SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from ssetape.analysis.knowledge import ANALYSIS_VERSION, Knowledge
from ssetape.records import EventRow
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from ssetape.storage.writer import Writer

Fields = Callable[..., dict[str, Any]]


def chat_rows(texts: list[str], *, done: bool = True, end: bool = True) -> list[EventRow]:
    datas = [
        orjson.dumps(
            {"model": "gpt-4o-mini", "choices": [{"index": 0, "delta": {"content": t}}]}
        ).decode()
        for t in texts
    ]
    if end:  # the finish_reason chunk and the usage chunk
        datas.append(
            '{"model":"gpt-4o-mini","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}'
        )
        datas.append(
            '{"model":"gpt-4o-mini","choices":[],"usage":'
            '{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12}}'
        )
    if done:
        datas.append("[DONE]")
    return [
        (i, 100_000 + 20_000 * i, None, d, None, f"data: {d}\n\n".encode())
        for i, d in enumerate(datas)
    ]


def test_finished_exchanges_are_analysed_before_flush_returns(
    store: Store, exchange_fields: Fields
) -> None:
    seen: list[list[tuple[int, str]]] = []
    knowledge = Knowledge(store)

    def on_finished(done: list[tuple[int, str]]) -> None:
        seen.append(done)
        knowledge.save_live(done)

    w = Writer(store, on_finished=on_finished)
    w.start()
    try:
        w.begin("a" * 32, **exchange_fields(request_body=b'{"model":"gpt-4o-mini","stream":true}'))
        w.add_events("a" * 32, chat_rows(["Hel", "lo", "!"], done=True))
        w.begin("b" * 32, **exchange_fields())
        w.add_events("b" * 32, chat_rows(["cut"], done=False, end=False))
        w.finish("a" * 32, state="completed", status=200, ttfb_us=90_000, duration_us=200_000)
        assert w.flush()
        a = Queries(store).exchange("a" * 32)
        assert a is not None and a.analysis_version == ANALYSIS_VERSION
        assert (a.api, a.model, a.outcome, a.outcome_reason) == (
            "chat_completions",
            "gpt-4o-mini",
            "completed",
            "stop",
        )
        assert (a.input_tokens, a.output_tokens, a.total_tokens) == (9, 3, 12)
        assert a.output_text == "Hello!" and a.ttft_us == 100_000
        assert (a.gap_median_us, a.gap_max_us) == (20_000, 20_000)
        # Still streaming: nothing derived yet.
        b = Queries(store).exchange("b" * 32)
        assert b is not None and b.analysis_version is None and b.outcome is None
        w.finish("b" * 32, state="truncated", status=200)
        assert w.flush()
    finally:
        w.close()
    b = Queries(store).exchange("b" * 32)
    assert b is not None and b.outcome == "cut"
    codes = [f.code for f in knowledge.findings(b.id)]
    assert codes == ["no_terminal_event"]
    assert sorted(pair for done in seen for pair in done) == sorted([(a.id, a.uid), (b.id, b.uid)])


def test_a_failing_analysis_never_stops_the_writer(store: Store, exchange_fields: Fields) -> None:
    def broken(done: list[tuple[int, str]]) -> None:
        raise RuntimeError("analysis bug")

    w = Writer(store, on_finished=broken)
    w.start()
    try:
        w.begin("c" * 32, **exchange_fields())
        w.add_events("c" * 32, chat_rows(["x"], done=True))
        w.finish("c" * 32, state="completed", status=200)
        assert w.flush()
        w.begin("d" * 32, **exchange_fields())
        w.finish("d" * 32, state="completed", status=200)
        assert w.flush()
    finally:
        w.close()
    assert {x.uid for x in Queries(store).exchanges()} == {"c" * 32, "d" * 32}
    c = Queries(store).exchange("c" * 32)
    assert c is not None and c.event_count == 4
    # `ssetape reindex` repairs what the hook could not do.
    assert Knowledge(store).reanalyse(Knowledge(store).exchange_ids(stale_only=True)) == 2
    c = Queries(store).exchange("c" * 32)
    assert c is not None and c.outcome == "completed"
