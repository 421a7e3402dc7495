"""HAR 1.2 export: the structure viewers expect, decoded bodies, per-event timing kept."""

from __future__ import annotations

import datetime as dt
import gzip
import io
import stat
import tracemalloc
from pathlib import Path
from typing import Any, cast

import orjson
import pytest
from click.testing import CliRunner
from sqlalchemy import Table, insert

from ssetape.cassettes.har import Har
from ssetape.cli.main import main
from ssetape.storage.models import Chunk, Event, Exchange
from ssetape.storage.store import Store

T0 = dt.datetime(2026, 3, 1, 12, 0, 0, 250000, tzinfo=dt.UTC)
SSE = [b": OPENROUTER PROCESSING\n\n", b'data: {"n":1}\n\n', b"event: done\ndata: [DONE]\n\n"]


def base(uid: str, **kw: Any) -> dict[str, Any]:
    return {
        "uid": uid, "started_at": T0, "method": "POST", "scheme": "https",
        "host": "api.example.com", "port": 443, "path": "/v1/chat/completions", "query": "",
        "http_version": "HTTP/2.0", "fingerprint": uid,
        "request_headers": [["content-type", "application/json"],
                            ["authorization", "Bearer <redacted:0123456789ab>"]],
        "request_body": b'{"stream":true}', "status": 200, "reason": "OK",
        "state": "completed", "ttfb_us": 120_000, "duration_us": 480_500, **kw,
    }  # fmt: skip


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store.open(str(tmp_path / "s.db"))
    xt = cast(Table, Exchange.__table__)
    with s.engine.begin() as conn:
        sse_headers = [["content-type", "text/event-stream"]]
        a = conn.execute(
            insert(xt).returning(xt.c.id),
            base("a" * 32, is_stream=True, response_headers=sse_headers, event_count=3),
        ).scalar_one()
        conn.execute(insert(cast(Table, Event.__table__)), [
            {"exchange_id": a, "seq": i, "offset_us": 130_000 + i * 100_000, "raw": raw,
             "event": "done" if i == 2 else None if i == 0 else "message",
             "data": [None, '{"n":1}', "[DONE]"][i]}
            for i, raw in enumerate(SSE)
        ])  # fmt: skip
        gz = gzip.compress(b'{"ok":true}')
        b = conn.execute(
            insert(xt).returning(xt.c.id),
            base("b" * 32, started_at=T0 + dt.timedelta(seconds=1), query="a=1&b=",
                 request_body=b"\xff\xfe", response_body=gz,
                 response_headers=[["content-type", "application/json"],
                                   ["content-encoding", "gzip"], ["set-cookie", "s=1"]]),
        ).scalar_one()  # fmt: skip
        conn.execute(insert(cast(Table, Chunk.__table__)),
                     [{"exchange_id": b, "seq": 0, "offset_us": 1, "data": gz}])  # fmt: skip
        conn.execute(insert(xt), base("c" * 32, started_at=T0 + dt.timedelta(seconds=2),
                                      status=None, reason=None, state="failed",
                                      error="connection refused", ttfb_us=None,
                                      duration_us=None))  # fmt: skip
    return s


def test_har_document(store: Store, tmp_path: Path) -> None:
    out = tmp_path / "t.har"
    assert Har(store).export(out) == 3
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    log = orjson.loads(out.read_bytes())["log"]
    assert log["version"] == "1.2" and log["creator"]["name"] == "ssetape"
    stream, gz, failed = log["entries"]
    for e in log["entries"]:
        assert set(e) >= {"startedDateTime", "time", "request", "response", "cache", "timings"}
        assert set(e["request"]) >= {"method", "url", "httpVersion", "cookies", "headers",
                                     "queryString", "headersSize", "bodySize"}  # fmt: skip
        assert set(e["response"]) >= {"status", "statusText", "httpVersion", "cookies",
                                      "headers", "content", "redirectURL", "headersSize",
                                      "bodySize"}  # fmt: skip
        assert all(e["timings"][k] >= 0 for k in ("send", "wait", "receive"))
        dt.datetime.fromisoformat(e["startedDateTime"])

    assert stream["startedDateTime"] == "2026-03-01T12:00:00.250000+00:00"
    assert stream["time"] == 480.5
    assert stream["timings"]["wait"] == 120.0 and stream["timings"]["receive"] == 360.5
    assert stream["request"]["url"] == "https://api.example.com/v1/chat/completions"
    assert stream["request"]["postData"] == {
        "mimeType": "application/json",
        "text": '{"stream":true}',
    }
    assert stream["response"]["content"]["text"] == b"".join(SSE).decode()
    assert stream["_ssetape"] == [
        {"seq": 0, "offset_us": 130_000, "event": None, "data": None},
        {"seq": 1, "offset_us": 230_000, "event": "message", "data": '{"n":1}'},
        {"seq": 2, "offset_us": 330_000, "event": "done", "data": "[DONE]"},
    ]

    assert gz["request"]["queryString"] == [{"name": "a", "value": "1"}, {"name": "b", "value": ""}]
    assert gz["request"]["postData"]["_encoding"] == "base64"
    assert gz["response"]["content"]["text"] == '{"ok":true}'  # content-encoding undone
    assert {"name": "set-cookie", "value": "s=1"} not in gz["response"]["headers"]  # masked

    assert failed["response"]["status"] == 0 and failed["response"]["bodySize"] == -1
    assert "failed (connection refused)" in failed["comment"]
    store.close()


def test_har_from_the_command_line(store: Store, tmp_path: Path) -> None:
    db = str(store.path)
    store.close()
    runner = CliRunner()
    r = runner.invoke(main, ["export", "--db", db, "-o", str(tmp_path / "x.har")])
    assert r.exit_code == 0, r.output
    assert len(orjson.loads((tmp_path / "x.har").read_bytes())["log"]["entries"]) == 3
    r = runner.invoke(
        main, ["export", "--db", db, "--format", "har", "-o", "-", "--state", "failed"]
    )
    assert r.exit_code == 0
    assert [e["comment"][:18] for e in orjson.loads(r.stdout_bytes)["log"]["entries"]] == [
        "ssetape exchange c"
    ]


def har_of(store: Store) -> tuple[bytes, int]:
    """The HAR document of ``store`` and the peak memory its export took."""
    out = io.BytesIO()
    tracemalloc.start()
    try:
        Har(store).write(out)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return out.getvalue(), peak - len(out.getvalue()) * 2  # less the document itself


@pytest.mark.parametrize("tail", [b"", b"\xff"], ids=["text", "not utf-8"])
def test_a_long_stream_is_exported_a_page_at_a_time_the_same(
    store: Store, tail: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream too long to hold is written from pages: the same document as one read whole
    (base64 when it is not text), in a fraction of the memory (2M events held took 1.6 GiB)."""
    xt = cast(Table, Exchange.__table__)
    n = 20_000
    with store.engine.begin() as conn:
        x = conn.execute(
            insert(xt).returning(xt.c.id),
            base("d" * 32, started_at=T0 + dt.timedelta(seconds=3), is_stream=True,
                 response_headers=[["content-type", "text/event-stream"]], event_count=n),
        ).scalar_one()  # fmt: skip
        conn.execute(insert(cast(Table, Event.__table__)), [
            {"exchange_id": x, "seq": i, "offset_us": i, "event": None, "data": f"{i}" * 4,
             "raw": b"data: %s\n\n" % (b"%d" % i * 4) + (tail if i == n // 2 else b"")}
            for i in range(n)
        ])  # fmt: skip
    monkeypatch.setattr("ssetape.cassettes.har._BATCH_EVENTS", n // 10)  # a long stream
    paged, paged_peak = har_of(store)
    monkeypatch.setattr("ssetape.cassettes.har._BATCH_EVENTS", 10 * n)  # read whole
    whole, whole_peak = har_of(store)
    # The long stream's entry (the others hold masks made with a key of each export's own).
    entry = orjson.loads(paged)["log"]["entries"][-1]
    assert entry == orjson.loads(whole)["log"]["entries"][-1]
    assert len(entry["_ssetape"]) == n
    content = entry["response"]["content"]
    assert ("encoding" in content) == bool(tail)
    assert content["size"] == entry["response"]["bodySize"] == len(b"".join(
        b"data: %s\n\n" % (b"%d" % i * 4) for i in range(n))) + len(tail)  # fmt: skip
    assert paged_peak < whole_peak / 4, (paged_peak, whole_peak)
    store.close()
