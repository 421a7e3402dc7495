"""WebSocket sessions in cassettes: recorded through `ssetape record` from a fake upstream that
speaks as OpenAI Realtime and Gemini Live do, exported (format version 3), imported into new
SQLite and PostgreSQL stores row for row, redacted again on import, refused with one line
when hostile, and shown in HAR as Chrome shows them. A cassette without a session is the
version-2 file it always was, byte for byte."""

from __future__ import annotations

import base64
import datetime as dt
import functools
import io
import subprocess
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import openai
import orjson
import pytest
from sqlalchemy import Table, insert, select
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from ssetape.cassettes.cassette import Cassette
from ssetape.cassettes.har import Har
from ssetape.cassettes.store_io import write_cassette
from ssetape.simulator.simulator import Simulator
from ssetape.simulator.ws_gemini import GEMINI_PARTS
from ssetape.storage.cassette_rows import CassetteRows
from ssetape.storage.models import Event, Exchange
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from tests.addons.stores import pg_schema
from tests.conftest import SSETAPE, start_ssetape

KEY = "sk-proj-LEAKrealtime0123456789"  # the SDK's bearer token and a browser's subprotocol
GOOG = "AIzaLEAKgoogle0123456789abcdef"  # Gemini's x-goog-api-key and ?key=
AUDIO = bytes(range(256)) * 4  # a binary frame that is not UTF-8
GEMINI = "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent"
GOLDEN = Path(__file__).with_name("golden_http_v2.jsonl")  # written by ssetape before sessions
VOLATILE = ("uid", "started_at", "recorder")
SESSIONS = 5


def realtime(client: openai.OpenAI, model: str) -> None:
    """One Realtime session with the official SDK: one response asked for, read to its end."""
    with client.realtime.connect(model=model) as conn:
        conn.recv()
        conn.response.create()
        try:
            for event in conn:
                if event.type in ("response.done", "error"):
                    break
        except ConnectionClosed:
            pass  # the server closed with a code, or cut the connection


def record_sessions(url: str) -> None:
    """Through the recording proxy at ``url``: three SDK sessions (completed, closed by the
    server with a code, cut), a browser's (its key in a subprotocol, a binary audio frame),
    Gemini Live's (key in a header and the query, JSON in binary frames) and one HTTP GET."""
    client = openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0)
    for model in ("ok", "close", "cut"):
        realtime(client, model)
    ws_url = url.replace("http://", "ws://")
    protocols: Any = ["realtime", f"openai-insecure-api-key.{KEY}"]
    with connect(ws_url + "/v1/realtime?model=ok", subprotocols=protocols) as ws:
        ws.recv(timeout=10)
        ws.send(AUDIO)
        ws.recv(timeout=10)
        ws.recv(timeout=10)
    headers = {"x-goog-api-key": GOOG}
    with connect(f"{ws_url}{GEMINI}?key={GOOG}", additional_headers=headers) as ws:
        ws.send(orjson.dumps({"setup": {"model": "models/gemini-live"}}))
        ws.recv(timeout=10)
        ws.send(orjson.dumps({"clientContent": {"turns": [], "turnComplete": True}}))
        for _ in range(len(GEMINI_PARTS) + 2):
            ws.recv(timeout=10)
    # Not an upgrade: the simulator answers it as plain HTTP (an exchange without a
    # session: a 404, no API has that path).
    httpx.get(url + "/v1/models", timeout=10)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory, confdir: Path) -> Iterator[Path]:
    """A store recorded through `ssetape record`, then stopped."""
    db = tmp_path_factory.mktemp("ws") / "rec.db"
    with Simulator().serve_in_thread() as upstream:
        url = upstream.url
        proc = start_ssetape(
            ["record", "--db", str(db), "--port", "0", "--confdir", str(confdir),
             "--mode", f"reverse:{url}"],
            db=str(db),
        )  # fmt: skip
        record_sessions(proc.url)
        assert proc.stop() == 0, proc.log.decode()
    with Store.open(str(db), create=False) as store:
        xs = Queries(store).exchanges(limit=20)
        assert sum(x.transport == "websocket" for x in xs) == SESSIONS, xs
    yield db


def rows(db: str) -> list[Any]:
    """Everything a store holds of its exchanges and their events, ids aside, export order."""
    out = []
    with Store.open(db, create=False) as store, store.engine.connect() as conn:
        xt, et = cast(Table, Exchange.__table__), cast(Table, Event.__table__)
        for x in conn.execute(select(xt).order_by(xt.c.fingerprint, xt.c.started_at, xt.c.id)):
            xd = {k: v for k, v in x._mapping.items() if k not in (*VOLATILE, "id")}
            q = select(et).where(et.c.exchange_id == x.id).order_by(et.c.seq)
            events = [{k: v for k, v in r._mapping.items() if k != "exchange_id"}
                      for r in conn.execute(q)]  # fmt: skip
            out.append((xd, events))
    return out


def export(db: str, tape: Path) -> bytes:
    with Store.open(db, create=False) as store:
        Cassette(tape).export(store)
    return tape.read_bytes()


def lines(text: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in text.splitlines()]


def assert_session_lines(text: bytes) -> None:
    """What a reviewer reads: version 3, each message's sender and frame type before its
    payload, text frames as text and binary ones as base64, and no key anywhere."""
    header, *rest = lines(text)
    assert header == {"ssetape_cassette": 3, "redact_fields": []}
    sessions = [x for x in rest if x.get("transport") == "websocket"]
    assert len(sessions) == SESSIONS and all(x["status"] == 101 for x in sessions)
    messages = [e for e in rest if "direction" in e]
    assert all(list(e) == ["kind", "seq", "offset_us", "direction", "opcode", "raw"]
               for e in messages)  # fmt: skip
    assert {(e["direction"], e["opcode"]) for e in messages} == {
        ("client", "text"), ("server", "text"), ("client", "binary"), ("server", "binary")
    }  # fmt: skip
    binary = [e["raw"] for e in messages if e["opcode"] == "binary"]
    assert all(set(raw) == {"b64"} for raw in binary)
    assert {"b64": base64.b64encode(AUDIO).decode()} in binary
    assert all(isinstance(e["raw"], str) for e in messages if e["opcode"] == "text")
    # How each ended: as the store has it (the close code and reason of the server's close).
    closed = "the server closed the WebSocket session: "
    assert [x["error"] for x in sessions if (x["error"] or "").startswith(closed)] == [
        closed + "1011 upstream overloaded"
    ]
    [cut] = [x for x in sessions if x["state"] == "truncated"]
    assert "without a WebSocket close frame" in cut["error"]
    for secret in (KEY, GOOG, KEY.removeprefix("sk-proj-"), GOOG.removeprefix("AIza")):
        assert secret.encode() not in text


def test_sessions_round_trip_row_for_row(recorded: Path, tmp_path: Path) -> None:
    text = export(str(recorded), tmp_path / "tape.jsonl")
    assert_session_lines(text)
    new = tmp_path / "new.db"
    with Store.open(str(new)) as store:
        report = Cassette(tmp_path / "tape.jsonl").import_into(store)
        assert (report.exchanges, report.skipped, report.ignored) == (SESSIONS + 1, 0, {})
        assert Cassette(tmp_path / "tape.jsonl").import_into(store).skipped == SESSIONS + 1
    # Every event as recorded, its direction, opcode, offset and payload byte for byte, and
    # what the analysis derives (model, outcome, usage, the messages' names and text).
    before, after = rows(str(recorded)), rows(str(new))
    assert after == before
    assert sum(len(events) for _, events in after) >= 25
    sessions = [x for x, _ in after if x["transport"] == "websocket"]
    assert {x["outcome"] for x in sessions} == {"completed", "error", "cut"}
    assert all(e["event"] for _, events in after for e in events if e["opcode"] == "text")
    assert export(str(new), tmp_path / "again.jsonl") == text


def test_sessions_round_trip_through_postgresql(recorded: Path, tmp_path: Path) -> None:
    text = export(str(recorded), tmp_path / "tape.jsonl")
    with pg_schema() as url:
        with Store.open(url) as pg:
            Cassette(tmp_path / "tape.jsonl").import_into(pg)
        assert rows(url) == rows(str(recorded))
        assert export(url, tmp_path / "again.jsonl") == text


def test_an_http_only_export_is_unchanged(recorded: Path, tmp_path: Path) -> None:
    """A cassette that ssetape wrote before sessions is written again byte for byte; and
    leaving a store's sessions out of an export leaves version 2 and no session field."""
    with Store.open(str(tmp_path / "s.db")) as store:
        Cassette(GOLDEN).import_into(store)
        Cassette(tmp_path / "again.jsonl").export(store)
    assert (tmp_path / "again.jsonl").read_bytes() == GOLDEN.read_bytes()
    with Store.open(str(recorded), create=False) as store:
        [http] = [x for x in Queries(store).exchanges(limit=20) if x.transport is None]
        out = io.BytesIO()
        assert write_cassette(store, out, Queries.only(http.id)) == 1
    header, exchange = lines(out.getvalue())
    assert header["ssetape_cassette"] == 2 and exchange["status"] == 404
    assert b"transport" not in out.getvalue() and b"direction" not in out.getvalue()


def test_a_version_2_cassette_with_sessions_still_imports(recorded: Path, tmp_path: Path) -> None:
    """Exports between recording sessions and format 3 said version 2 and wrote a binary
    frame holding JSON as text: they import as the sessions they recorded."""
    text = export(str(recorded), tmp_path / "tape.jsonl")
    old = []
    for line in lines(text):
        if line.get("ssetape_cassette"):
            line["ssetape_cassette"] = 2
        raw = line.get("raw")
        if isinstance(raw, dict) and base64.b64decode(raw["b64"]) != AUDIO:
            line["raw"] = base64.b64decode(raw["b64"]).decode()
        old.append(orjson.dumps(line) + b"\n")
    (tmp_path / "v2.jsonl").write_bytes(b"".join(old))
    with Store.open(str(tmp_path / "new.db")) as store:
        Cassette(tmp_path / "v2.jsonl").import_into(store)
    assert rows(str(tmp_path / "new.db")) == rows(str(recorded))


# -- by hand: what an import takes, redacts and refuses ------------------------------------

UPGRADE: dict[str, Any] = {
    "kind": "exchange", "method": "GET", "scheme": "https", "host": "api.openai.com",
    "port": 443, "path": "/v1/realtime", "query": "model=gpt-realtime",
    "http_version": "HTTP/1.1",
    "request_headers": [["Upgrade", "websocket"], ["Sec-WebSocket-Version", "13"]],
    "request_body": "", "fingerprint": "f" * 64, "status": 101,
    "reason": "Switching Protocols", "is_stream": True, "state": "completed",
    "response_headers": [["Upgrade", "websocket"], ["Connection", "Upgrade"]],
    "ttfb_us": 1000, "duration_us": 500_000, "transport": "websocket",
}  # fmt: skip
MESSAGES: list[dict[str, Any]] = [
    {"kind": "event", "seq": 0, "offset_us": 2000, "direction": "server", "opcode": "text",
     "raw": '{"type":"session.created","event_id":"ev_1"}'},
    {"kind": "event", "seq": 1, "offset_us": 9000, "direction": "client", "opcode": "binary",
     "raw": {"b64": base64.b64encode(b"\x00\xffaudio").decode()}},
]  # fmt: skip
HEADER = {"ssetape_cassette": 3, "redact_fields": []}


def cassette(path: Path, *objs: dict[str, Any]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(o) + b"\n" for o in (HEADER, *objs)))
    return path


def test_an_import_redacts_the_upgrade_again(tmp_path: Path) -> None:
    """A cassette from elsewhere may carry keys: none reaches the store, nor a new cassette;
    the session's messages stay exactly as they were."""
    leaky = {
        **UPGRADE, "query": f"model=gpt-realtime&key={GOOG}",
        "request_headers": [
            ["Upgrade", "websocket"], ["Authorization", f"Bearer {KEY}"],
            ["Sec-WebSocket-Protocol", f"realtime, openai-insecure-api-key.{KEY}, x-y"],
            ["x-goog-api-key", GOOG],
        ],
    }  # fmt: skip
    db = tmp_path / "s.db"
    tape = cassette(tmp_path / "in.jsonl", leaky, *MESSAGES)
    r = subprocess.run([SSETAPE, "import", str(tape), "--db", str(db)], capture_output=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([SSETAPE, "export", "--db", str(db), "-o", str(tmp_path / "out.jsonl")])
    assert r.returncode == 0
    out = (tmp_path / "out.jsonl").read_bytes()
    for f in [*tmp_path.glob("s.db*"), tmp_path / "out.jsonl"]:
        data = f.read_bytes()
        for secret in (KEY, GOOG):
            assert secret.encode() not in data, (f.name, secret)
    exchange, *messages = lines(out)[1:]
    headers = dict(map(tuple, exchange["request_headers"]))
    assert headers["Sec-WebSocket-Protocol"].startswith("realtime, openai-insecure-api-key.<")
    assert headers["Sec-WebSocket-Protocol"].endswith(">, x-y")
    assert headers["x-goog-api-key"].startswith("<redacted:")
    assert "key=%3Credacted" in exchange["query"] or "key=<redacted" in exchange["query"]
    assert messages == MESSAGES
    with Store.open(str(db), create=False) as store:
        [x] = Queries(store).exchanges()
        got = [
            (e.direction, e.opcode, e.offset_us, e.raw, e.event)
            for e in Queries(store).events(x.id)
        ]
    created = b'{"type":"session.created","event_id":"ev_1"}'
    assert got == [
        ("server", "text", 2000, created, "session.created"),
        ("client", "binary", 9000, b"\x00\xffaudio", None),
    ]


def message(**changes: Any) -> dict[str, Any]:
    return {**MESSAGES[1], "seq": 2, "offset_us": 10_000, **changes}


HOSTILE: list[tuple[list[dict[str, Any]], str]] = [
    ([UPGRADE, message(raw={"b64": "not base64!"})], "'raw': invalid base64"),
    ([UPGRADE, message(offset_us=-1)], "'offset_us' must be between 0 and 86400000000"),
    ([UPGRADE, message(offset_us=10**15)], "'offset_us' must be between 0 and"),
    ([UPGRADE, *MESSAGES, message(offset_us=5000)], "offset_us 5000 is before the previous"),
    ([UPGRADE, message(offset_us=80_000_000)], "offset_us 80000000 is after the exchange ended"),
    ([UPGRADE, message(opcode="ping")], "'opcode' must be one of text, binary"),
    ([UPGRADE, message(opcode=9)], "'opcode' must be a string"),
    ([UPGRADE, message(direction="both")], "'direction' must be one of client, server"),
    ([UPGRADE, message(opcode="text", raw={"b64": "//4="})], "payload must be UTF-8"),
    ([UPGRADE, {k: v for k, v in message().items() if k != "opcode"}],
     "a WebSocket message needs 'opcode'"),
    ([{**UPGRADE, "transport": None}, message()], "'direction' belongs to a WebSocket message"),
    ([UPGRADE, {"kind": "chunk", "seq": 0, "offset_us": 1, "data": "x"}],
     "a WebSocket session has no chunk lines"),
    ([{**UPGRADE, "status": 200}], "a WebSocket session's status must be 101"),
    ([{**UPGRADE, "transport": "pigeon"}], "'transport' must be one of http, websocket"),
    ([{**UPGRADE, "error": "the server closed the WebSocket session: 1006 gone"}],
     "close code 1006, which no close frame carries"),
    ([{**UPGRADE, "error": "the server closed the WebSocket session: 99999999 x"}],
     "names no close code"),
]  # fmt: skip


def refused(tmp_path: Path, tape: Path, *args: str) -> str:
    """`ssetape import` of ``tape`` into a store that holds a session already: its one-line
    error; what the store held is all there still."""
    db = tmp_path / "s.db"
    with Store.open(str(db)) as store:
        Cassette(cassette(tmp_path / "good.jsonl", UPGRADE, *MESSAGES)).import_into(store)
    before = rows(str(db))
    r = subprocess.run([SSETAPE, "import", str(tape), "--db", str(db), *args],
                       capture_output=True, text=True)  # fmt: skip
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    [msg] = r.stderr.strip().splitlines()
    assert rows(str(db)) == before and len(before[0][1]) == len(MESSAGES)
    return msg


@pytest.mark.parametrize(("objs", "needle"), HOSTILE, ids=[n[:30] for _, n in HOSTILE])
def test_a_hostile_session_is_refused_with_its_line(
    tmp_path: Path, objs: list[dict[str, Any]], needle: str
) -> None:
    msg = refused(tmp_path, cassette(tmp_path / "pr.jsonl", {**UPGRADE, "path": "/x"}, *objs))
    assert f"pr.jsonl:{len(objs) + 2}: " in msg and needle in msg, msg
    assert msg.endswith("(nothing imported)"), msg


def test_a_huge_payload_is_refused_by_the_line_limit(tmp_path: Path) -> None:
    huge = message(raw={"b64": base64.b64encode(b"\x00" * (3 << 20)).decode()})
    msg = refused(
        tmp_path, cassette(tmp_path / "pr.jsonl", UPGRADE, huge), "--max-line-bytes", "2MiB"
    )
    assert "pr.jsonl:3: line longer than 2097152 bytes" in msg, msg


# -- exports that hold a session's messages a page at a time ------------------------------

T0 = dt.datetime(2026, 3, 1, 12, 0, 0, tzinfo=dt.UTC)


def long_session(db: Path, n: int) -> Store:
    """A store holding one session of ``n`` messages, every third one binary audio."""
    store = Store.open(str(db))
    xt, et = cast(Table, Exchange.__table__), cast(Table, Event.__table__)
    values = {k: v for k, v in UPGRADE.items() if k != "kind"}
    values.update(uid="w" * 32, started_at=T0, request_body=b"", duration_us=n + 10)
    with store.engine.begin() as conn:
        xid = conn.execute(insert(xt).returning(xt.c.id), values).scalar_one()
        conn.execute(insert(et), [
            {"exchange_id": xid, "seq": i, "offset_us": i,
             "direction": "client" if i % 2 else "server",
             "opcode": "binary" if i % 3 == 0 else "text",
             "raw": AUDIO[:64] if i % 3 == 0 else b'{"type":"delta","n":%d}' % i,
             "event": None, "data": None}
            for i in range(n)
        ])  # fmt: skip
    return store


def peak(write: Any) -> tuple[bytes, int]:
    out = io.BytesIO()
    tracemalloc.start()
    try:
        write(out)
        top = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return out.getvalue(), top - len(out.getvalue()) * 2  # less the document itself


def test_a_long_session_is_exported_a_page_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    n = 20_000
    store = long_session(tmp_path / "s.db", n)
    rows_of = "ssetape.cassettes.store_io.CassetteRows"
    monkeypatch.setattr(rows_of, functools.partial(CassetteRows, together=n // 10))
    paged, paged_peak = peak(lambda out: write_cassette(store, out))
    monkeypatch.setattr(rows_of, functools.partial(CassetteRows, together=10 * n))
    whole, whole_peak = peak(lambda out: write_cassette(store, out))
    store.close()
    assert paged == whole and len(paged.splitlines()) == n + 2
    assert paged_peak < whole_peak / 4, (paged_peak, whole_peak)


def test_har_shows_a_session_as_chrome_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    n = 6_000
    store = long_session(tmp_path / "s.db", n)
    monkeypatch.setattr("ssetape.cassettes.har._BATCH_EVENTS", 10 * n)  # read whole
    whole, _ = peak(lambda out: Har(store).write(out))
    monkeypatch.setattr("ssetape.cassettes.har._BATCH_EVENTS", n // 10)  # a page at a time
    paged, _ = peak(lambda out: Har(store).write(out))
    store.close()
    [entry] = orjson.loads(whole)["log"]["entries"]
    assert entry == orjson.loads(paged)["log"]["entries"][0]
    assert entry["_resourceType"] == "websocket" and entry["response"]["status"] == 101
    assert entry["response"]["content"]["size"] == 0  # messages are frames, not a body
    frames = entry["_webSocketMessages"]
    assert len(frames) == len(entry["_ssetape"]) == n
    assert frames[0] == {
        "type": "receive", "time": T0.timestamp(), "opcode": 2,
        "data": base64.b64encode(AUDIO[:64]).decode(),
    }  # fmt: skip
    assert frames[1] == {
        "type": "send", "time": round(T0.timestamp() + 1e-6, 6), "opcode": 1,
        "data": '{"type":"delta","n":1}',
    }  # fmt: skip
    assert entry["_ssetape"][1]["direction"] == "client"
