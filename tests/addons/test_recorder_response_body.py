"""Response bodies that are not streams, through a real `ssetape record` with a small
``ssetape_max_response_body``: one past it reaches the client byte for byte and is stored as
its size, SHA-256 and first bytes; the exchange, `ssetape show` and replay (`ssetape replay`
and a cassette played by the pytest plugin's session) all say it was not stored whole,
rather than answer a body cut short. A body within it is stored and replayed as before, and
so is a stream."""

from __future__ import annotations

import hashlib
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from ssetape.testing.tape_session import TapeSession
from ssetape.vocabulary import Header
from tests.addons.stores import Recorders
from tests.conftest import SSETAPE, start_ssetape
from tests.upstreams import serving

BOUND = 64 << 10
HEAD = 64 << 10  # what is kept of a body over the bound (as much as `show` prints)
BIG = 3 << 20  # past the bound
SMALL = b'{"id":"small","object":"chat.completion","choices":[]}'
SSE = b'data: {"n":1}\n\ndata: {"n":2}\n\ndata: [DONE]\n\n'


def big_body() -> bytes:
    """A JSON answer of BIG bytes, no two 64 KiB blocks alike."""
    filler = b"".join(b"%08d" % i for i in range(BIG // 8))
    body = b'{"data":"' + filler + b'"}'
    return body[: BIG - 2] + b'"}'


BODY = big_body()


@pytest.fixture
def upstream() -> Iterator[str]:
    """/big: BODY with a content-length; /big-chunked: BODY chunked (no length); /small:
    SMALL; /sse: a short event stream."""

    def serve(conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as f:
            while line := f.readline():
                path = line.split()[1]
                length = 0
                while (line := f.readline()).strip():
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                f.read(length)
                if path == b"/sse":
                    head = b"content-type: text/event-stream\r\n"
                    conn.sendall(b"HTTP/1.1 200 OK\r\n%scontent-length: %d\r\n\r\n%s"
                                 % (head, len(SSE), SSE))  # fmt: skip
                    continue
                json = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                if path == b"/big-chunked":
                    conn.sendall(json + b"transfer-encoding: chunked\r\n\r\n")
                    for i in range(0, len(BODY), 1 << 20):
                        part = BODY[i : i + (1 << 20)]
                        conn.sendall(b"%x\r\n%s\r\n" % (len(part), part))
                    conn.sendall(b"0\r\n\r\n")
                    continue
                body = BODY if path == b"/big" else SMALL
                conn.sendall(json + b"content-length: %d\r\n\r\n%s" % (len(body), body))

    with serving(serve) as url:
        yield url


def show(db: str, xid: int, *args: str) -> str:
    r = subprocess.run(
        [SSETAPE, "show", str(xid), "--db", db, *args], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def record(recorders: Recorders, db: str, upstream: str) -> dict[str, bytes]:
    """Each path once through a recorder whose bound is BOUND; what the client got."""
    proc = recorders.start(
        db, "--mode", f"reverse:{upstream}", "--set", f"ssetape_max_response_body={BOUND}"
    )
    got = {}
    for path in ("/big", "/big-chunked", "/small", "/sse"):
        r = httpx.post(proc.url + path, json={"q": path}, timeout=60)
        assert r.status_code == 200
        got[path] = r.content
    assert proc.stop() == 0, proc.log.decode()
    return got


def test_a_body_over_the_bound_passes_whole_and_is_stored_as_its_size_and_hash(
    tmp_path: Path, recorders: Recorders, upstream: str
) -> None:
    db = str(tmp_path / "tape.db")
    got = record(recorders, db, upstream)
    # The client got every byte, as sent, whatever the framing.
    assert got["/big"] == BODY and got["/big-chunked"] == BODY
    assert got["/small"] == SMALL and got["/sse"] == SSE
    sha = hashlib.sha256(BODY).hexdigest()
    with Store.open(db, create=False) as store:
        xs = {x.path: x for x in Queries(store).exchanges()}
        for path in ("/big", "/big-chunked"):
            x = xs[path]
            assert x.state == "completed"
            assert (x.response_body_bytes, x.response_body_sha256) == (BIG, sha)
            assert x.response_body == BODY[:HEAD]  # its first bytes, not the body
            assert x.error is not None and "not stored whole" in x.error, x.error
            assert "ssetape_max_response_body" in x.error
        # Within the bound, and streams: as before.
        small, sse = xs["/small"], xs["/sse"]
        assert small.response_body == SMALL and small.response_body_bytes is None
        assert small.error is None
        assert sse.is_stream and sse.error is None and sse.response_body_bytes is None
        assert [e.raw for e in Queries(store).events(sse.id)] == [
            b'data: {"n":1}\n\n', b'data: {"n":2}\n\n', b"data: [DONE]\n\n"
        ]  # fmt: skip
        big_id = xs["/big"].id
    # The store holds the head, not the body (two of them).
    assert Path(db).stat().st_size < BIG
    # `show` says so, with its size and hash.
    text = show(db, big_id)
    assert "not stored whole" in text and str(BIG) in text and sha in text
    doc = orjson.loads(show(db, big_id, "--json"))
    assert doc["response"]["body_not_stored"] == {"bytes": BIG, "sha256": sha}
    assert doc["response"]["body_bytes"] == BIG


def test_replay_refuses_a_body_not_stored_whole(
    tmp_path: Path, recorders: Recorders, upstream: str
) -> None:
    db = str(tmp_path / "tape.db")
    record(recorders, db, upstream)
    replay = start_ssetape(["replay", "--db", db, "--port", "0", "--mode", f"reverse:{upstream}"],
                           db=db)  # fmt: skip
    try:
        for path in ("/big", "/big-chunked"):
            r = httpx.post(replay.url + path, json={"q": path}, timeout=30)
            assert r.status_code == 502, r.text
            assert "ssetape_max_response_body" in r.headers[Header.INCOMPLETE]
            assert "not stored whole" in r.text
        # The others replay as they were recorded.
        r = httpx.post(replay.url + "/small", json={"q": "/small"}, timeout=30)
        assert (r.status_code, r.content) == (200, SMALL)
        r = httpx.post(replay.url + "/sse", json={"q": "/sse"}, timeout=30)
        assert (r.status_code, r.content) == (200, SSE)
    finally:
        assert replay.stop() == 0, replay.log.decode()


def test_a_cassette_of_it_is_refused_by_the_plugins_session(
    tmp_path: Path, recorders: Recorders, upstream: str
) -> None:
    """Exported to a cassette and played as the pytest plugin plays one: the test sees an
    error, not a truncated body, and the session explains why it fails."""
    db, tape = str(tmp_path / "tape.db"), tmp_path / "tape.jsonl"
    record(recorders, db, upstream)
    r = subprocess.run([SSETAPE, "export", "--db", db, "-o", str(tape)], capture_output=True,
                       text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    session = TapeSession(tape, confdir=tmp_path, lock_dir=tmp_path / "locks")
    session.start()
    try:
        base = session.base_url(upstream)
        r = httpx.post(base + "/big", json={"q": "/big"}, timeout=30)
        assert r.status_code == 502 and r.content != BODY[:HEAD]
        assert "ssetape_max_response_body" in r.headers[Header.INCOMPLETE]
        r = httpx.post(base + "/small", json={"q": "/small"}, timeout=30)
        assert (r.status_code, r.content) == (200, SMALL)
        assert "ssetape_max_response_body" in session.explain()
    finally:
        session.close()
