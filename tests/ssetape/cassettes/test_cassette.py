"""Cassettes: export and import round trips, through the real replay path, and bad input."""

from __future__ import annotations

import base64
import itertools
import os
import sqlite3
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import orjson
import pytest
from sqlalchemy import Table, insert, select

from ssetape.cassettes.cassette import Cassette, CassetteError
from ssetape.framing.sse import SseParser
from ssetape.redactor import Redactor
from ssetape.replay.request_index import RequestIndex
from ssetape.simulator.simulator import Simulator
from ssetape.storage.models import Chunk, Event, Exchange
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from tests.addons.stores import pg_schema
from tests.conftest import SIM_SPEED, SSETAPE, Proc, start_ssetape

SECRET_QUERY = "hunter2-query-secret"
SECRET_FIELD = "tok-field-secret-123"
SECRET_BEARER = "sk-bearer-secret-456"


def chat(model: str, text: str = "tape me", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": text}], **extra}


# (path, body, extra headers); the last two carry secrets that matching sees (see below).
CALLS: list[tuple[str, bytes, dict[str, str]]] = [
    ("/v1/chat/completions", orjson.dumps(chat("sim-pause", stream=True)),
     {"authorization": f"Bearer {SECRET_BEARER}"}),
    ("/v1/chat/completions", orjson.dumps(chat("sim-gzip", stream=True)),
     {"accept-encoding": "gzip"}),
    ("/v1/chat/completions", orjson.dumps(chat("sim-gzip")), {"accept-encoding": "gzip"}),
    ("/v1/messages", orjson.dumps({**chat("sim-m", stream=True), "max_tokens": 20}), {}),
    ("/v1/chat/completions", orjson.dumps(chat("sim-error", stream=True)), {}),
    ("/v1/chat/completions", orjson.dumps(chat("sim-cut", stream=True)), {}),
    ("/v1/chat/completions", b"\xff\xfe not json \x00\x01", {}),
    ("/v1/chat/completions?api_key=" + SECRET_QUERY, orjson.dumps(chat("sim-chat")), {}),
    ("/v1/chat/completions",
     orjson.dumps(chat("sim-chat", stream=True, metadata={"user_token": SECRET_FIELD})), {}),
]  # fmt: skip
# Masks of redacted query parameters and fields are keyed per store, and an imported store has
# a key of its own: `ssetape replay` cannot match those two (the pytest plugin can, below).
PLAIN = CALLS[:-2]


def send(
    base: str, path: str, body: bytes, headers: dict[str, str]
) -> tuple[int, bytes, list[float]]:
    """Status, raw body, and the arrival time of each SSE block after the request was sent."""
    parser, times, raw = SseParser(), [], b""
    with httpx.Client(timeout=30) as c:
        t0 = time.perf_counter()
        with c.stream("POST", base + path, content=body, headers=headers) as r:
            try:
                for chunk in r.iter_raw():
                    raw += chunk
                    times += [time.perf_counter() - t0] * len(parser.feed(chunk))
            except httpx.RemoteProtocolError:
                pass  # the cut stream ends the way it was recorded
    return r.status_code, raw, times


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory, confdir: Path) -> Iterator[tuple[str, Path]]:
    """A store recorded through `ssetape record` from a private simulator, then stopped."""
    tmp = tmp_path_factory.mktemp("recorded")
    db = tmp / "tape.db"
    with Simulator(speed=SIM_SPEED).serve_in_thread() as sim:
        proc = start_ssetape(
            ["record", "--db", str(db), "--port", "0", "--confdir", str(confdir),
             "--mode", f"reverse:{sim.url}", "--redact-field", "user_token"],
            db=str(db),
        )  # fmt: skip
        for path, body, headers in CALLS:
            send(proc.url, path, body, headers)
        assert proc.stop() == 0, proc.log.decode()
        yield sim.url, db


def rows(db: Path | str) -> list[Any]:
    """Everything a store holds about its exchanges, ids left out, in export order."""
    store = Store.open(str(db), create=False)
    out = []
    with store.engine.connect() as conn:
        xt = cast(Table, Exchange.__table__)
        order = (xt.c.fingerprint, xt.c.started_at, xt.c.id)
        for x in conn.execute(select(xt).order_by(*order)):
            xd = dict(x._mapping)
            xid = xd.pop("id")
            kids = []
            for model in (Event, Chunk):
                t = cast(Table, model.__table__)
                q = select(t).where(t.c.exchange_id == xid).order_by(t.c.seq)
                kids.append([{k: v for k, v in r._mapping.items() if k != "exchange_id"}
                             for r in conn.execute(q)])  # fmt: skip
            out.append((xd, kids))
    store.close()
    return out


VOLATILE = ("uid", "started_at", "recorder")


def without(exchanges: list[Any], keys: tuple[str, ...]) -> list[Any]:
    return [({k: v for k, v in x.items() if k not in keys}, kids) for x, kids in exchanges]


def test_round_trip_keeps_every_row(recorded: tuple[str, Path], tmp_path: Path) -> None:
    _, db = recorded
    tape = tmp_path / "tape.jsonl"
    store = Store.open(str(db), create=False)
    assert Cassette(tape).export(store) == len(CALLS)
    store.close()
    assert stat.S_IMODE(tape.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["tape.jsonl"]  # no temporary file left
    text = tape.read_text()
    kinds = [orjson.loads(line).get("kind") for line in text.splitlines()[1:]]
    assert kinds.count("exchange") == len(CALLS) and "chunk" in kinds and "event" in kinds
    assert '{"b64":' in text  # gzip chunks and the binary request body

    new = tmp_path / "new.db"
    store = Store.open(str(new))
    report = Cassette(tape).import_into(store)
    assert (report.exchanges, report.skipped, report.ignored) == (len(CALLS), 0, {})
    assert Cassette(tape).import_into(store).skipped == len(CALLS)  # twice: nothing doubles
    assert orjson.loads(store.setting("redact_fields") or "[]") == ["user_token"]
    store.close()
    # Every recorded value but what is new to each recording of the same interaction.
    assert without(rows(new), VOLATILE) == without(rows(db), VOLATILE)
    assert all(x["recorder"] is None for x, _ in rows(new))

    again = tmp_path / "again.jsonl"
    store = Store.open(str(new), create=False)
    Cassette(again).export(store)
    store.close()
    assert again.read_bytes() == tape.read_bytes()  # stable: same store, same bytes


def test_replay_of_an_import_is_byte_and_timing_identical(
    recorded: tuple[str, Path], tmp_path: Path, confdir: Path
) -> None:
    upstream, db = recorded
    tape, new = tmp_path / "tape.jsonl", tmp_path / "new.db"
    r = subprocess.run([SSETAPE, "export", "--db", str(db), "-o", str(tape)], capture_output=True)
    assert r.returncode == 0 and b"exported 9 exchange(s)" in r.stderr
    store = Store.open(str(new))
    Cassette(tape).import_into(store)
    store.close()

    def replay(store: Path) -> tuple[Proc, list[tuple[int, bytes, list[float]]]]:
        proc = start_ssetape(
            ["replay", "--db", str(store), "--port", "0", "--speed", "1",
             "--mode", f"reverse:{upstream}"],
            db=str(store),
        )  # fmt: skip
        got = [send(proc.url, *call) for call in PLAIN]
        assert proc.stop() == 0
        return proc, got

    _, original = replay(db)
    _, imported = replay(new)
    for (status, raw, times), (status2, raw2, times2) in zip(original, imported, strict=True):
        assert status == status2 and status != 404
        assert raw == raw2
        assert len(times) == len(times2)
        # Same recorded offsets on both sides: the same gaps (the pause is 0.75 s).
        for i in range(1, len(times)):
            assert abs((times[i] - times[i - 1]) - (times2[i] - times2[i - 1])) < 0.1
    paused = original[0][2]
    assert max(b - a for a, b in itertools.pairwise(paused)) > 0.2  # keep-alives


def test_secrets_and_the_key_stay_out(recorded: tuple[str, Path], tmp_path: Path) -> None:
    _, recorded_db = recorded
    db = tmp_path / "copy.db"  # this test adds a row: other tests share the recording
    with sqlite3.connect(recorded_db) as src, sqlite3.connect(db) as dst:
        src.backup(dst)
    tape = tmp_path / "tape.jsonl"
    store = Store.open(str(db), create=False)
    key = store.setting("redaction_key")
    assert key
    Cassette(tape).export(store)
    # A row written by other means than the recorder, with a secret in the clear.
    with store.engine.begin() as conn:
        row = dict(conn.execute(select(cast(Table, Exchange.__table__)).limit(1)).one()._mapping)
        row.update(uid="f" * 32, request_headers=[["Authorization", "Bearer sk-clear-789"]],
                   query="api_key=clear-in-query&x=1")  # fmt: skip
        del row["id"]
        conn.execute(insert(Exchange.__table__), row)
    leaky = tmp_path / "leaky.jsonl"
    Cassette(leaky).export(store)
    store.close()
    for text in (tape.read_text(), leaky.read_text()):
        for secret in (key, SECRET_QUERY, SECRET_FIELD, SECRET_BEARER, "sk-clear-789",
                       "clear-in-query"):  # fmt: skip
            assert secret not in text
    assert "Bearer <redacted:" in leaky.read_text()


def test_masked_fields_match_under_another_key(recorded: tuple[str, Path], tmp_path: Path) -> None:
    """What the plugin replays with: the import's store has its own key, yet masked query
    parameters and fields still match, whatever their value is on this machine."""
    _, db = recorded
    tape = tmp_path / "tape.jsonl"
    store = Store.open(str(db), create=False)
    Cassette(tape).export(store)
    store.close()
    store = Store.open(str(tmp_path / "new.db"))
    report = Cassette(tape).import_into(store)
    redactor = Redactor(os.urandom(32), fields=report.redact_fields)
    index = RequestIndex(store, redactor, keep_misses=True)
    index.refresh()
    path, body, _ = CALLS[-1]
    other = orjson.dumps(chat("sim-chat", stream=True, metadata={"user_token": "another"}))
    host = "127.0.0.1"
    assert isinstance(index.lookup("POST", host, path, body), int)
    assert isinstance(index.lookup("POST", host, path, other), int)
    assert isinstance(
        index.lookup("POST", host, "/v1/chat/completions?api_key=x", CALLS[-2][1]), int
    )
    assert not index.misses
    store.close()


def test_ordering_is_by_request_then_recording_order(tmp_path: Path) -> None:
    store = Store.open(str(tmp_path / "s.db"))
    xt = cast(Table, Exchange.__table__)
    base: dict[str, Any] = {
        "method": "POST", "scheme": "https", "host": "api.example.com", "port": 443,
        "path": "/v1/x", "http_version": "HTTP/1.1", "request_headers": [], "state": "completed",
    }  # fmt: skip
    import datetime as dt

    t = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    with store.engine.begin() as conn:
        for i, fp in enumerate(["b", "a", "b", "a"]):
            conn.execute(insert(xt), {**base, "uid": f"{i:032d}", "fingerprint": fp,
                                      "path": f"/v1/x{i}",
                                      "started_at": t + dt.timedelta(seconds=10 - i)})  # fmt: skip
    out = tmp_path / "t.jsonl"
    Cassette(out).export(store)
    lines = [orjson.loads(line) for line in out.read_text().splitlines()[1:]]
    assert [(x["fingerprint"], x["path"][-1]) for x in lines] == [
        ("a", "3"),
        ("a", "1"),
        ("b", "2"),
        ("b", "0"),
    ]
    assert not {"uid", "started_at", "recorder"} & set(lines[0])  # new to every recording
    store.close()


def test_a_failed_export_keeps_the_old_file(recorded: tuple[str, Path], tmp_path: Path) -> None:
    _, db = recorded
    out = tmp_path / "tape.jsonl"
    out.write_text("old contents\n")
    store = Store.open(str(db), create=False)

    def boom(done: int, total: int) -> None:
        raise RuntimeError("disk full, say")

    with pytest.raises(RuntimeError):
        Cassette(out).export(store, progress=boom)
    store.close()
    assert out.read_text() == "old contents\n"
    assert [p.name for p in tmp_path.iterdir()] == ["tape.jsonl"]


# -- bad input -------------------------------------------------------------------------

HEADER = b'{"ssetape_cassette": 1}\n'
EXCHANGE = orjson.dumps({
    "kind": "exchange", "uid": "a" * 32, "started_at": "2026-01-01T00:00:00+00:00",
    "method": "POST", "scheme": "http", "host": "h", "port": 80, "path": "/", "query": "",
    "http_version": "HTTP/1.1", "request_headers": [], "fingerprint": "f", "status": 200,
    "is_stream": True, "state": "completed",
}) + b"\n"  # fmt: skip
EVENT = b'{"kind": "event", "seq": 0, "offset_us": 10, "raw": "data: x\\n\\n"}\n'


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"", "empty file, not an ssetape cassette"),
        (EXCHANGE, ":1: not an ssetape cassette"),
        (b"[1, 2]\n", ":1: not an ssetape cassette"),
        (b'{"ssetape_cassette": 4}\n', ":1: cassette format version 4 is newer than this"),
        (b'{"ssetape_cassette": "1"}\n', ":1: bad cassette format version"),
        (HEADER + EXCHANGE + b'{"kind": "event", "seq": 0,\n', ":3: invalid JSON"),
        (HEADER + b"[]\n", ":2: expected a JSON object"),
        (HEADER + EVENT, ":2: event line before any exchange line"),
        (HEADER + b'{"uid": "x"}\n', ':2: no "kind"'),
        (HEADER + b'{"kind": "cookie"}\n', ":2: unknown kind"),
        (
            HEADER + EXCHANGE.replace(b'"method":"POST",', b""),
            ":2: exchange line is missing 'method'",
        ),
        (HEADER + EXCHANGE.replace(b'"port":80', b'"port":"80"'), ":2: 'port' must be an integer"),
        (
            HEADER + EXCHANGE.replace(b'"method":"POST"', b'"method":null'),
            "'method' must not be null",
        ),
        (
            HEADER + EXCHANGE.replace(b'"2026-01-01T00:00:00+00:00"', b'"yesterday"'),
            ":2: 'started_at': not an ISO 8601 datetime",
        ),
        (
            HEADER + EXCHANGE + EVENT.replace(b'"data: x\\n\\n"', b'{"b64": "!!not base64!!"}'),
            ":3: 'raw': invalid base64",
        ),
        (
            HEADER + EXCHANGE + EVENT.replace(b'"data: x\\n\\n"', b"42"),
            ":3: 'raw' must be a string",
        ),
        (HEADER + EXCHANGE + EVENT + EVENT, ":4: event seq 0 does not follow seq 0"),
        (HEADER + EXCHANGE + EXCHANGE, ":3: duplicate exchange uid"),
        (
            HEADER
            + EXCHANGE
            + b'{"kind": "event", "seq": 0, "offset_us": 1, "raw": "'
            + b"x" * 5000
            + b'"}\n',
            ":3: line longer than 4096 bytes",
        ),
        # Values of the right type that would break ssetape after the import.
        (
            HEADER + EXCHANGE.replace(b'"request_headers":[]', b'"request_headers":{"a":1}'),
            ":2: 'request_headers' must be a list of [name, value] pairs",
        ),
        (
            HEADER + EXCHANGE.replace(b'"request_headers":[]', b'"request_headers":[["a",1]]'),
            ":2: 'request_headers' must be a list of [name, value] pairs of strings",
        ),
        (
            HEADER + EXCHANGE.replace(b'"state":"completed"', b'"state":"pwned"'),
            ":2: 'state' must be one of recording, completed",
        ),
        (
            HEADER + EXCHANGE.replace(b'"status":200', b'"status":200,"ttfb_us":315360000000000'),
            ":2: 'ttfb_us' must be between 0 and 86400000000",
        ),
        (
            HEADER
            + EXCHANGE
            + EVENT.replace(b'"offset_us": 10', b'"offset_us": 1000000000000000000'),
            ":3: 'offset_us' must be between 0 and 86400000000",
        ),
        (
            HEADER
            + EXCHANGE.replace(b'"status":200', b'"status":200,"duration_us":5000')
            + EVENT.replace(b'"offset_us": 10', b'"offset_us": 9000000'),
            ":3: event offset_us 9000000 is after the exchange ended (5000)",
        ),
        (
            HEADER
            + EXCHANGE.replace(
                b'"status":200', b'"status":200,"details":{"a":' + b"[" * 1000 + b"]" * 1000 + b"}"
            ),
            ":2: 'details' is nested deeper than 16",
        ),
        (
            HEADER + EXCHANGE.replace(b'"port":80', b'"port":99999999999999999999'),
            ":2:",
        ),
    ],
)
def test_malformed_cassettes_are_refused_with_the_line(
    tmp_path: Path, content: bytes, needle: str
) -> None:
    f = tmp_path / "bad.jsonl"
    f.write_bytes(content)
    store = Store.open(str(tmp_path / "s.db"))
    with pytest.raises(CassetteError, match=None) as e:
        Cassette(f, max_line_bytes=4096).import_into(store)
    msg = str(e.value)
    assert needle in msg and str(f) in msg and "\n" not in msg, msg
    assert Queries(store).exchanges() == []  # all or nothing
    store.close()


def test_total_size_limit_and_unknown_keys(tmp_path: Path) -> None:
    f = tmp_path / "t.jsonl"
    f.write_bytes(HEADER + EXCHANGE + EVENT)
    with pytest.raises(CassetteError, match="larger than 100 bytes"):
        Cassette(f, max_bytes=100).check()
    newer = EXCHANGE.replace(b'"kind":"exchange",', b'"kind":"exchange","galaxy":42,')
    f.write_bytes(HEADER + newer + EVENT.replace(b'"seq"', b'"colour": 1, "seq"') + b"\n\n")
    report = Cassette(f).check()
    assert report.ignored == {"exchange.galaxy": 2, "event.colour": 3}


def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"ssetape_cassette": 9}\n')
    db = tmp_path / "s.db"
    r = subprocess.run(
        [SSETAPE, "import", str(bad), "--db", str(db)], capture_output=True, text=True
    )
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [
        f"Error: {bad}:1: cassette format version 9 is newer than this ssetape reads (3): "
        "upgrade ssetape"
    ]
    assert not db.exists()  # refused before a store was created


def test_cli_commands_in_process(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from ssetape.cli.main import main

    r = CliRunner().invoke(main, ["import", str(tmp_path / "nope.jsonl"), "--db", "x.db"])
    assert r.exit_code == 1 and "cannot read" in r.output and r.exception is not None
    r = CliRunner().invoke(main, ["import", "t.jsonl", "--max-line-bytes", "lots"])
    assert r.exit_code == 2 and "is not a size" in r.output
    r = CliRunner().invoke(main, ["export", "--db", str(tmp_path / "no.db"), "-o", "x.jsonl"])
    assert r.exit_code == 1 and "no ssetape database" in r.output


def test_cli_filters_and_stdout(recorded: tuple[str, Path], tmp_path: Path) -> None:
    _, db = recorded
    r = subprocess.run([SSETAPE, "export", "--db", str(db), "-o", "-", "--state", "truncated"],
                       capture_output=True)  # fmt: skip
    assert r.returncode == 0
    lines = [orjson.loads(line) for line in r.stdout.splitlines()]
    assert lines[0]["ssetape_cassette"] == 2 and lines[0]["redact_fields"] == ["user_token"]
    assert [x["state"] for x in lines if x.get("kind") == "exchange"] == ["truncated"]
    from click.testing import CliRunner

    from ssetape.cli.main import main

    r2 = CliRunner().invoke(main, ["export", "--db", str(db), "-o", "-", "--path", "/v1/messages"])
    exchanges = [
        x for x in map(orjson.loads, r2.stdout.splitlines()) if x.get("kind") == "exchange"
    ]
    assert [x["path"] for x in exchanges] == ["/v1/messages"]
    with Store.open(str(db), create=False) as store:
        [uid] = [x.uid for x in Queries(store).exchanges() if x.path == "/v1/messages"]
    r2 = CliRunner().invoke(main, ["export", "--db", str(db), "-o", "-", "--id", uid])
    assert r2.stdout.count('"kind":"exchange"') == 1
    for until, count in (("2000-01-01", 0), ("0m", len(CALLS))):  # "0m": started before now
        r2 = CliRunner().invoke(main, ["export", "--db", str(db), "-o", "-", "--until", until])
        assert r2.stdout.count('"kind":"exchange"') == count, r2.output


def test_bytes_are_text_when_utf8_else_base64(tmp_path: Path) -> None:
    from ssetape.cassettes.codec import encode_bytes

    assert encode_bytes("café".encode()) == "café"
    assert encode_bytes(b"\xff\x00") == {"b64": base64.b64encode(b"\xff\x00").decode()}


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh schema on the PostgreSQL server of $SSETAPE_TEST_PG_URL, dropped afterwards."""
    with pg_schema() as url:
        yield url


def test_round_trip_through_postgresql(
    recorded: tuple[str, Path], tmp_path: Path, pg_url: str
) -> None:
    _, db = recorded
    tape, again = tmp_path / "tape.jsonl", tmp_path / "again.jsonl"
    store = Store.open(str(db), create=False)
    Cassette(tape).export(store)
    store.close()
    pg = Store.open(pg_url)
    try:
        assert Cassette(tape).import_into(pg).exchanges == len(CALLS)
        Cassette(again).export(pg)
    finally:
        pg.close()
    assert again.read_bytes() == tape.read_bytes()
