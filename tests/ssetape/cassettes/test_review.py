"""Cassettes review well: re-recording an unchanged interaction changes only timing values,
each event's bytes appear once, and cassettes of format 1 still load."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson

from ssetape.cassettes.cassette import Cassette
from ssetape.simulator.simulator import Simulator
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from tests.conftest import SSETAPE, Proc

TIMING = {"offset_us", "ttfb_us", "duration_us"}
CALLS = [
    ("/v1/chat/completions", {"model": "sim-chat", "stream": True,
                              "messages": [{"role": "user", "content": "same again"}]}),
    ("/v1/responses", {"model": "sim-gzip", "stream": True, "input": "same again"}),
    ("/v1/messages", {"model": "sim-m", "stream": True, "max_tokens": 30,
                      "messages": [{"role": "user", "content": "same again"}]}),
]  # fmt: skip


def record_and_export(ssetape_proc: Callable[..., Proc], sim: Simulator, db: Path) -> bytes:
    proc = ssetape_proc("record", "--mode", f"reverse:{sim.url}", db=str(db))
    with httpx.Client(timeout=30, headers={"accept-encoding": "gzip"}) as c:
        for path, body in CALLS:
            c.post(proc.url + path, json=body).read()
    assert proc.stop() == 0
    out = db.with_suffix(".jsonl")
    subprocess.run([SSETAPE, "export", "--db", str(db), "-o", str(out)], check=True)
    return out.read_bytes()


def test_re_recording_changes_only_timing_values(
    ssetape_proc: Callable[..., Proc], tmp_path: Path
) -> None:
    with Simulator(speed=20).serve_in_thread() as sim:
        first = record_and_export(ssetape_proc, sim, tmp_path / "one.db")
        second = record_and_export(ssetape_proc, sim, tmp_path / "two.db")
    a, b = first.splitlines(), second.splitlines()
    assert len(a) == len(b) > 20
    changed: set[str] = set()
    for x, y in zip(a, b, strict=True):
        ox, oy = orjson.loads(x), orjson.loads(y)
        assert ox.keys() == oy.keys()
        changed |= {k for k in ox if ox[k] != oy[k]}
    assert changed <= TIMING, changed
    events = [orjson.loads(line) for line in a if b'"kind":"event"' in line]
    assert events and all(set(e) == {"kind", "seq", "offset_us", "raw"} for e in events)


def v1_cassette(tmp_path: Path) -> Path:
    exchange: dict[str, Any] = {
        "kind": "exchange", "uid": "u" * 32, "started_at": "2026-01-01T00:00:00+00:00",
        "method": "POST", "scheme": "https", "host": "api.openai.com", "port": 443,
        "path": "/v1/chat/completions", "query": "", "http_version": "HTTP/1.1",
        "request_headers": [], "request_body": "{}", "fingerprint": "f" * 64, "status": 200,
        "response_headers": [["content-type", "text/event-stream"]], "is_stream": True,
        "state": "completed", "ttfb_us": 10, "duration_us": 100, "event_count": 2,
        "recorder": "host:1:2", "model": "gpt-old",
    }  # fmt: skip
    events = [
        {"kind": "event", "seq": 0, "offset_us": 20, "event": "message", "data": "as written",
         "raw": 'data: {"choices":[]}\n\n'},
        {"kind": "event", "seq": 1, "offset_us": 30, "raw": "data: [DONE]\n\n"},
    ]  # fmt: skip
    path = tmp_path / "v1.jsonl"
    lines = [{"ssetape_cassette": 1, "redact_fields": []}, exchange, *events]
    path.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    return path


def test_a_format_1_cassette_still_loads_as_written(tmp_path: Path) -> None:
    with Store.open(str(tmp_path / "s.db")) as store:
        report = Cassette(v1_cassette(tmp_path)).import_into(store)
        assert (report.exchanges, report.events) == (1, 2)
        [x] = Queries(store).exchanges()
        assert (x.uid, x.recorder, x.event_count) == ("u" * 32, "host:1:2", 2)
        first, last = list(Queries(store).events(x.id))
        assert first.data == "as written"  # format 1 said it: kept, not parsed again
        assert (last.event, last.data) == ("message", "[DONE]")  # not said: parsed from raw


def test_format_2_derives_what_it_leaves_out(tmp_path: Path) -> None:
    """Importing a format-1 cassette and exporting it gives format 2; importing that again
    gives the same events and analysis, a uid of its own, and adds nothing the second time."""
    with Store.open(str(tmp_path / "a.db")) as store:
        Cassette(v1_cassette(tmp_path)).import_into(store)
        Cassette(tmp_path / "v2.jsonl").export(store)
    text = (tmp_path / "v2.jsonl").read_bytes()
    assert text.startswith(b'{"ssetape_cassette":2,') and b"as written" not in text
    with Store.open(str(tmp_path / "b.db")) as store:
        assert Cassette(tmp_path / "v2.jsonl").import_into(store).exchanges == 1
        assert Cassette(tmp_path / "v2.jsonl").import_into(store).skipped == 1
        [x] = Queries(store).exchanges()
        assert x.uid != "u" * 32 and x.recorder is None and x.event_count == 2
        assert [(e.event, e.data) for e in Queries(store).events(x.id)] == [
            ("message", '{"choices":[]}'),
            ("message", "[DONE]"),
        ]
        assert x.api == "chat_completions"  # analysed again on import
