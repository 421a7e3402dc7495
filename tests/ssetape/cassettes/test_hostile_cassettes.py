"""Cassettes as an attacker writes them (they arrive in pull requests), and stores written by
hand: nothing that is not an HTTP header line reaches a replayed response, a key named twice
is refused, and what an import holds is bounded by counts, not by what a line claims."""

from __future__ import annotations

import socket
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from ssetape.cassettes.cassette import Cassette, CassetteError
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from ssetape.testing.tape_session import TapeSession
from tests.conftest import SSETAPE, Proc

HOST = "h.test"
HEADER = b'{"ssetape_cassette": 2}\n'
GOOD = {
    "kind": "exchange", "method": "POST", "scheme": "http", "host": HOST, "port": 80,
    "path": "/", "query": "", "http_version": "HTTP/1.1", "request_headers": [],
    "fingerprint": "f", "status": 200, "reason": "OK", "is_stream": False,
    "state": "completed", "response_headers": [["content-type", "text/plain"]],
    "response_body": "hello", "ttfb_us": 100, "duration_us": 200,
}  # fmt: skip
SPLIT = "a\r\nset-cookie: injected=1"
SPOOF = "a\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 8\r\n\r\ninjected"
# What a cassette's author may try, and what the refusal names.
HOSTILE: list[tuple[dict[str, Any], str]] = [
    ({"response_headers": [["content-type", "text/plain"], ["x-a", SPLIT]]},
     "'response_headers' pair #2: the value of x-a is not an HTTP field value"),
    ({"response_headers": [["x-a", SPOOF]]}, "the value of x-a is not an HTTP field value"),
    ({"response_headers": [["x-a\r\nset-cookie: injected=1", "1"]]},
     "'response_headers' pair #1: its name is not an HTTP token"),
    ({"response_headers": [["x-a", "a\x00b"]]}, "not an HTTP field value"),
    ({"request_headers": [["x-a", SPLIT]]}, "'request_headers' pair #1"),
    ({"reason": "OK\r\nset-cookie: injected=1"}, "'reason' holds a control character"),
    ({"response_headers": [["x", "1"]] * 10_001}, "has 10001 headers, more than 10000"),
]  # fmt: skip


def line(**changes: Any) -> bytes:
    return orjson.dumps({**GOOD, **changes}) + b"\n"


def run_import(tape: Path, db: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SSETAPE, "import", str(tape), "--db", str(db)], capture_output=True, text=True
    )


def refused(tmp_path: Path, content: bytes) -> str:
    """`ssetape import` of ``content``: its one-line error; nothing may have been stored."""
    tape, db = tmp_path / "pr.jsonl", tmp_path / "s.db"
    tape.write_bytes(content)
    r = run_import(tape, db)
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    [msg] = r.stderr.strip().splitlines()
    if db.exists():
        with Store.open(str(db), create=False) as store:
            assert Queries(store).exchanges() == []
    return msg


@pytest.mark.parametrize(
    ("changes", "needle"),
    HOSTILE,
    ids=["split", "spoof", "name", "nul", "request", "reason", "count"],
)
def test_import_refuses_what_is_not_an_http_header_line(
    tmp_path: Path, changes: dict[str, Any], needle: str
) -> None:
    msg = refused(tmp_path, HEADER + line() + line(**changes))
    assert "pr.jsonl:3: " in msg and needle in msg and "(nothing imported)" in msg, msg
    assert "\r" not in msg  # a value is shown escaped, if at all


@pytest.mark.parametrize(
    ("content", "where", "key"),
    [
        (HEADER + line().replace(b'"status":200', b'"status":200,"status":500'), 2, "status"),
        (HEADER + line() + line().replace(b'"method":"POST"', b'"method":"GET","method":"POST"'),
         3, "method"),
        # The same key behind an escape, and inside a bytes value's {"b64": ...}.
        (HEADER + line().replace(b'"status":200', b'"st\\u0061tus":500,"status":200'), 2,
         "status"),
        (HEADER + line().replace(b'"response_body":"hello"',
                                 b'"response_body":{"b64":"aGVsbG8=","b64":"ZXZpbA=="}'), 2, "b64"),
        (b'{"ssetape_cassette": 2, "redact_fields": ["api_key"], "redact_fields": []}\n', 1,
         "redact_fields"),
    ],
)  # fmt: skip
def test_a_key_named_twice_is_refused_with_its_line(
    tmp_path: Path, content: bytes, where: int, key: str
) -> None:
    """orjson keeps the last of two equal keys: a reviewer would read the first."""
    msg = refused(tmp_path, content)
    assert f'pr.jsonl:{where}: key "{key}" appears twice in one object' in msg, msg


def test_equal_names_that_are_not_repeated_keys_import(tmp_path: Path) -> None:
    """A key's name inside a value, and one key in two objects, are not repeats."""
    tape, db = tmp_path / "ok.jsonl", tmp_path / "s.db"
    body = '{"status": 1, "raw": "\\u00e9"} \\/ "status"'
    tape.write_bytes(HEADER + line(response_body=body, reason="status"))
    r = run_import(tape, db)
    assert r.returncode == 0, r.stderr
    with Store.open(str(db), create=False) as store:
        [x] = Queries(store).exchanges()
        assert (x.response_body, x.reason) == (body.encode(), "status")


def test_too_many_redact_fields_are_refused_before_a_store_exists(tmp_path: Path) -> None:
    fields = [f"f{i}" for i in range(10_001)]
    content = orjson.dumps({"ssetape_cassette": 2, "redact_fields": fields}) + b"\n" + line()
    msg = refused(tmp_path, content)
    assert 'pr.jsonl:1: "redact_fields" has 10001 fields, more than 10000' in msg, msg
    assert not (tmp_path / "s.db").exists()


def test_a_long_exchange_imports_in_batches_with_its_count(tmp_path: Path) -> None:
    """Events go in a batch at a time; the exchange's event count is still all of them, and
    an exchange the store has already skips its events."""
    n = 5_001
    events = b"".join(
        b'{"kind":"event","seq":%d,"offset_us":%d,"raw":"data: %d\\n\\n"}\n' % (i, i, i)
        for i in range(n)
    )
    stream = line(
        is_stream=True, response_body=None, duration_us=10_000,
        response_headers=[["content-type", "text/event-stream"]],
    )  # fmt: skip
    tape = tmp_path / "long.jsonl"
    tape.write_bytes(HEADER + stream + events + line(path="/b"))
    with Store.open(str(tmp_path / "s.db")) as store:
        report = Cassette(tape).import_into(store)
        assert (report.exchanges, report.events) == (2, n)
        x = next(x for x in Queries(store).exchanges() if x.path == "/")
        assert x.event_count == n and len(list(Queries(store).events(x.id))) == n
        again = Cassette(tape).import_into(store)
        assert (again.exchanges, again.events, again.skipped) == (0, 0, 2)


# -- a store written by hand (or by an older ssetape) -----------------------------------


def hand_written_store(db: Path) -> None:
    """A real SQLite store whose recording carries split headers and a split reason phrase,
    as an UPDATE by hand leaves it: import refuses them, so they are written afterwards."""
    tape = db.parent / "good.jsonl"
    tape.write_bytes(HEADER + line())
    with Store.open(str(db)) as store:
        Cassette(tape).import_into(store)
    corrupt(db)


def corrupt(db: Path) -> None:
    headers = [["content-type", "text/plain"], ["x-split", SPLIT], ["x-spoof", SPOOF],
               ["x-name\r\nset-cookie: injected=1", "1"], ["x-nul", "a\x00b"]]  # fmt: skip
    with sqlite3.connect(db) as conn:
        conn.execute(
            "UPDATE exchanges SET response_headers = ?, reason = ?",
            (orjson.dumps(headers).decode(), "OK\r\nset-cookie: injected=1"),
        )


def raw_request(url: str, *, proxy: bool = False) -> bytes:
    """Everything the server sends for one request, as a raw socket reads it."""
    host, port = url.removeprefix("http://").split(":")
    target = f"http://{HOST}/" if proxy else "/"
    with socket.create_connection((host, int(port)), timeout=20) as s:
        s.sendall(
            f"POST {target} HTTP/1.1\r\nhost: {HOST}\r\ncontent-length: 0\r\n"
            "connection: close\r\n\r\n".encode()
        )
        got = b""
        while chunk := s.recv(65536):
            got += chunk
    return got


def assert_one_clean_response(got: bytes) -> None:
    head, _, body = got.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0].startswith(b"HTTP/1.1 200"), got
    names = [h.partition(b":")[0].strip().lower() for h in lines[1:]]
    assert b"set-cookie" not in names and b"x-split" not in names, got
    assert b"content-type" in names
    assert body == b"hello" and b"injected" not in got and got.count(b"HTTP/1.1") == 1, got


@pytest.mark.parametrize("path", ["direct", "via mitmproxy"])
def test_a_hand_written_store_never_splits_a_replayed_response(
    ssetape_proc: Callable[..., Proc], tmp_path: Path, path: str
) -> None:
    db = tmp_path / "tape.db"
    hand_written_store(db)
    extra = [] if path == "direct" else ["--record-mode", "new_episodes"]
    proc = ssetape_proc("replay", "--mode", f"reverse:http://{HOST}", *extra, db=str(db))
    assert_one_clean_response(raw_request(proc.url))
    assert proc.stop() == 0
    log = proc.log.decode()
    assert "response header #2 not sent: the value of x-split is not" in log, log
    assert "its reason phrase holds a control character" in log


@pytest.mark.parametrize("url", ["base_url", "proxy_url"])
def test_the_pytest_plugin_never_splits_a_replayed_response(tmp_path: Path, url: str) -> None:
    tape = tmp_path / "tape.jsonl"
    tape.write_bytes(HEADER + line())
    session = TapeSession(tape, confdir=tmp_path, lock_dir=tmp_path / "locks")
    session.start()
    try:
        assert session._tmp is not None
        corrupt(session._tmp / "tape.db")  # its store, as a bad row would stand in it
        if url == "base_url":
            got = raw_request(session.base_url(f"http://{HOST}"))
        else:  # through the plugin's mitmproxy forwarder
            got = raw_request(session.proxy_url, proxy=True)
        assert_one_clean_response(got)
    finally:
        session.close()


def test_the_pytest_plugin_refuses_a_hostile_cassette_with_its_line(tmp_path: Path) -> None:
    tape = tmp_path / "tape.jsonl"
    tape.write_bytes(HEADER + line(response_headers=[["x-a", SPLIT]]))
    session = TapeSession(tape, confdir=tmp_path, lock_dir=tmp_path / "locks")
    with pytest.raises(CassetteError, match=r"tape\.jsonl:2: 'response_headers' pair #1"):
        session.start()
    session.close()
