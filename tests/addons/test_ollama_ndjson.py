"""Ollama's NDJSON streams through `ssetape record` and `ssetape replay`, read by httpx.

The upstream serves real Ollama captures (tests/data/real_streams) one line at a time, a few
milliseconds apart (tests.corpus.PAUSE): the store must hold one event per line with arrival
offsets that show that pacing, and replay must send the same bytes spread out as recorded.
Timing bounds are wide: the machine running the tests is shared and loaded.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import orjson

from ssetape.analysis.knowledge import Knowledge
from ssetape.storage.store import Store
from tests.conftest import Proc
from tests.corpus import PAUSE, PICK, RealStream, by_name, corpus_upstream

STREAMS = ("ollama_chat_llama3", "ollama_generate_llama3")


def timed_lines(client: httpx.Client, base: str, stream: RealStream) -> list[tuple[float, bytes]]:
    """The stream's request as Ollama's clients send it; each line of the answer with the
    moment (time.monotonic()) its last byte came."""
    lines: list[tuple[float, bytes]] = []
    pending = b""
    with client.stream(
        "POST",
        base + stream.meta["request_path"],
        content=stream.request_body,
        headers={PICK: stream.name, "content-type": "application/json"},
    ) as r:
        assert r.status_code == 200
        assert r.headers["content-type"] == "application/x-ndjson"
        for chunk in r.iter_raw():
            now = time.monotonic()
            pending += chunk
            while (end := pending.find(b"\n")) >= 0:
                lines.append((now, pending[: end + 1]))
                pending = pending[end + 1 :]
    assert pending == b"", "the body ends with a whole line"
    return lines


def knowledge_of(stream: RealStream) -> tuple[str, str, str, tuple[int, int]]:
    """What the capture's lines say (Ollama's docs/api.md): the model, the text, the last
    line's done_reason and counts."""
    docs = [orjson.loads(line) for line in stream.wire.splitlines()]
    last = docs[-1]
    assert last["done"] is True and not any(d["done"] for d in docs[:-1])
    text = "".join(d.get("message", {}).get("content", "") or d.get("response", "") for d in docs)
    counts = (int(last["prompt_eval_count"]), int(last["eval_count"]))
    return str(last["model"]), text, str(last["done_reason"]), counts


def test_ollama_ndjson_recorded_line_by_line_and_replayed_with_its_pacing(
    ssetape_proc: Callable[..., Proc],
) -> None:
    recorded: dict[str, list[tuple[float, bytes]]] = {}
    replayed: dict[str, list[tuple[float, bytes]]] = {}
    with corpus_upstream() as upstream, httpx.Client(timeout=30) as client:
        rec = ssetape_proc("record", "--mode", f"reverse:{upstream}")
        for name in STREAMS:
            recorded[name] = timed_lines(client, rec.url, by_name(name))
        assert rec.stop() == 0
        # Recorded timing (--speed 1, the default).
        replay = ssetape_proc("replay", "--mode", f"reverse:{upstream}", db=rec.db)
        for name in STREAMS:
            replayed[name] = timed_lines(client, replay.url, by_name(name))

    with Store.open(rec.db, create=False) as store:
        exchanges = {x.path: x for x in store.exchanges()}
        assert len(exchanges) == len(STREAMS)
        for name in STREAMS:
            stream = by_name(name)
            lines = stream.wire.splitlines(keepends=True)
            assert [line for _, line in recorded[name]] == lines, name
            x = exchanges[stream.meta["request_path"]]
            events = store.events(x.id)
            # One event per line, its exact bytes and its JSON text.
            assert [e.raw for e in events] == lines, name
            assert [e.data for e in events] == [line.rstrip(b"\n").decode() for line in lines]
            assert [e.seq for e in events] == list(range(len(lines)))
            assert (x.state, x.event_count) == ("completed", len(lines))
            offsets = [e.offset_us for e in events]
            assert offsets == sorted(offsets), (name, offsets)
            # The upstream waits PAUSE after each line: the last came at least (n-1) pauses
            # after the first. Half of that, and under 10 s, are the wide margins.
            span = offsets[-1] - offsets[0]
            assert 0.5 * (len(lines) - 1) * PAUSE * 1e6 <= span < 10e6, (name, span)

            model, text, reason, (inp, out) = knowledge_of(stream)
            # One API for both paths (the rules' name).
            got = (x.api, x.model, x.outcome, x.outcome_reason)
            assert got == ("ollama", model, "completed", reason), name
            assert (x.input_tokens, x.output_tokens, x.output_text) == (inp, out, text), name
            assert Knowledge(store).findings(x.id) == [], name

            # Replayed: the same bytes, line by line, spread out as they were recorded.
            again = replayed[name]
            assert b"".join(line for _, line in again) == stream.wire, name
            assert len(again) == len(lines)
            spread = again[-1][0] - again[0][0]
            assert spread >= 0.5 * span / 1e6, (name, spread, span)
            assert spread < span / 1e6 + 5, (name, spread, span)
