"""Ollama's NDJSON streams through `ssetape record` and `ssetape replay`, read by httpx.

The upstream serves real Ollama captures (tests/data/real_streams) one line at a time, a few
milliseconds apart (tests.corpus.PAUSE): the store must hold one event per line with arrival
offsets that show that pacing, and replay must send the same bytes spread out as recorded.
Timing bounds are wide: the machine running the tests is shared and loaded. A replayed
mid-stream error must be Ollama's own error line, and a cassette of AWS event streams and NDJSON
must bring back the same events, analysis and replayed bytes in a fresh store.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
from click.testing import CliRunner

from ssetape.analysis.knowledge import Knowledge
from ssetape.cli.main import main
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from tests.addons.test_bedrock_boto3 import ANTHROPIC, CONVERSE, EVENTSTREAM, Bedrock, aws_frames
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
        exchanges = {x.path: x for x in Queries(store).exchanges()}
        assert len(exchanges) == len(STREAMS)
        for name in STREAMS:
            stream = by_name(name)
            lines = stream.wire.splitlines(keepends=True)
            assert [line for _, line in recorded[name]] == lines, name
            x = exchanges[stream.meta["request_path"]]
            events = list(Queries(store).events(x.id))
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


def test_ollama_replayed_mid_stream_error_line(ssetape_proc: Callable[..., Proc]) -> None:
    """``error:event=2``: the first 2 recorded lines, then Ollama's own error line (what its
    server writes when the model fails mid-stream: ``{"error": "..."}``), and the body ends."""
    stream = by_name(STREAMS[0])
    lines = stream.wire.splitlines(keepends=True)
    with corpus_upstream() as upstream, httpx.Client(timeout=30) as client:
        rec = ssetape_proc("record", "--mode", f"reverse:{upstream}")
        assert b"".join(line for _, line in timed_lines(client, rec.url, stream)) == stream.wire
        assert rec.stop() == 0
        faulted = ("--fault", "error:event=2", "--speed", "0")  # at once: the lines matter here
        replay = ssetape_proc("replay", "--mode", f"reverse:{upstream}", *faulted, db=rec.db)
        got = [line for _, line in timed_lines(client, replay.url, stream)]
    assert got[:2] == lines[:2]
    assert len(got) == 3, got
    error = orjson.loads(got[2])
    assert list(error) == ["error"] and isinstance(error["error"], str) and error["error"]
    assert got[2].endswith(b"\n")


def exchange_view(store: Store, path: str) -> dict[str, Any]:
    """What a store says of the one exchange at ``path``: its events (all but the store's
    ids) and its analysis."""
    (x,) = [x for x in Queries(store).exchanges() if x.path == path]
    events = [
        (e.seq, e.offset_us, e.event, e.data, e.sse_id, e.raw) for e in Queries(store).events(x.id)
    ]
    return {
        "events": events,
        "request": (x.method, x.scheme, x.host, x.port, x.query, x.request_body),
        "response": (x.status, x.response_headers, x.state, x.event_count, x.ttfb_us),
        "api": x.api,
        "model": x.model,
        "outcome": (x.outcome, x.outcome_reason),
        "usage": (x.input_tokens, x.output_tokens, x.total_tokens),
        "text": x.output_text,
        "details": x.details,
        "findings": Knowledge(store).findings(x.id),
    }


def ssetape_cli(*args: str) -> str:
    """``ssetape <args>``'s own command, in this process (a new interpreter would cost a
    loaded machine seconds); its output."""
    done = CliRunner().invoke(main, list(args))
    assert done.exit_code == 0, (args, done.output, done.exception)
    return done.output


def test_cassette_round_trip_of_aws_event_streams_and_ndjson(
    ssetape_proc: Callable[..., Proc], tmp_path: Path
) -> None:
    """A store with a Bedrock Converse stream, an InvokeModelWithResponseStream stream and an
    Ollama stream -> ``ssetape export`` -> ``ssetape import`` into a fresh store: the same
    events (names, data, bytes, offsets) and the same analysis, and a replay from the imported
    store (upstream gone) answers boto3 and httpx with the capture's bytes."""
    converse, invoke, ollama = by_name(CONVERSE), by_name(ANTHROPIC), by_name(STREAMS[0])
    with corpus_upstream() as upstream, httpx.Client(timeout=30) as client:
        from_aws = (Bedrock(upstream, converse).converse(), Bedrock(upstream, invoke).invoke())
        rec = ssetape_proc("record", "--mode", f"reverse:{upstream}")
        assert Bedrock(rec.url, converse).converse() == from_aws[0]
        assert Bedrock(rec.url, invoke).invoke() == from_aws[1]
        assert b"".join(line for _, line in timed_lines(client, rec.url, ollama)) == ollama.wire
        assert rec.stop() == 0

    cassette = tmp_path / "tape.jsonl"
    ssetape_cli("export", "--db", rec.db, "-o", str(cassette))
    # The AWS frames (binary: lengths and CRCs) are written as {"b64": ...}, Ollama's lines
    # as text: the file stays JSON Lines.
    lines = [orjson.loads(line) for line in cassette.read_bytes().splitlines()]
    assert [d.get("kind") for d in lines].count("exchange") == 3
    raws = [d["raw"] for d in lines if d.get("kind") == "event"]
    assert sum(isinstance(r, dict) and list(r) == ["b64"] for r in raws) == len(
        aws_frames(converse) + aws_frames(invoke)
    )
    assert sum(isinstance(r, str) for r in raws) == len(ollama.wire.splitlines())
    imported = str(tmp_path / "imported.db")
    ssetape_cli("import", "--db", imported, str(cassette))

    paths = [s.meta["request_path"] for s in (converse, invoke, ollama)]
    with Store.open(rec.db, create=False) as a, Store.open(imported, create=False) as b:
        assert len(Queries(b).exchanges()) == 3
        views = [exchange_view(b, path) for path in paths]
        assert views == [exchange_view(a, path) for path in paths]
    # What is compared is what was recorded, read by its rules, with nothing to find.
    said = [(v["api"], v["outcome"][0], v["findings"], len(v["events"])) for v in views]
    frames = [aws_frames(converse), aws_frames(invoke)]
    assert said == [
        ("bedrock_converse", "completed", [], len(frames[0])),
        ("bedrock_invoke", "completed", [], len(frames[1])),
        ("ollama", "completed", [], len(ollama.wire.splitlines())),
    ]
    assert [(e[2], len(e[5])) for e in views[0]["events"]] == frames[0]
    assert b"".join(e[5] for e in views[1]["events"]) == invoke.wire
    assert all(v["usage"][0] and v["model"] for v in views), views

    # The upstream is gone: only the imported store can answer (at once: bytes are the point).
    mode = f"reverse:{upstream}"
    replay = ssetape_proc("replay", "--mode", mode, "--speed", "0", db=imported)
    replaying = Bedrock(replay.url, converse)
    assert replaying.converse() == from_aws[0]
    assert replaying.raw_again(replay.url) == (200, EVENTSTREAM, converse.wire)
    replaying = Bedrock(replay.url, invoke)
    assert replaying.invoke() == from_aws[1]
    assert replaying.raw_again(replay.url) == (200, EVENTSTREAM, invoke.wire)
    with httpx.Client(timeout=30) as client:
        got = b"".join(line for _, line in timed_lines(client, replay.url, ollama))
    assert got == ollama.wire
