"""Request bodies through a real `ssetape record`: an upload far over MAX_BODY streams to the
upstream byte for byte while the proxy stays small (its peak resident memory read from /proc),
the store keeps its size and hash, and `ssetape replay` matches the same upload again. A
client that sends its head and then trickles its body waits like one that trickles its head:
it is closed at ``ssetape_header_timeout`` and makes room at ``ssetape_max_connections``."""

from __future__ import annotations

import contextlib
import hashlib
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from ssetape.vocabulary import MAX_BODY
from tests.addons.stores import Recorders, wait_for
from tests.addons.test_guard import closed_by_peer
from tests.addons.test_recorder_bombs import peak_rss
from tests.conftest import start_ssetape
from tests.upstreams import serving

UPLOAD = 96 << 20  # six times MAX_BODY
BLOCK = 1 << 20
# What the upload may add to the proxy's peak: a few times MAX_BODY, not the upload. Buffered
# whole, it added 190-290 MiB (on a baseline of ~105 MiB); streamed, ~35 MiB.
PROXY_GROWTH = 5 * MAX_BODY


def read_body(f: object, fields: dict[str, str]) -> tuple[int, str]:
    """Size and sha256 of the body on ``f`` (a socket file), Content-Length or chunked."""
    digest, size = hashlib.sha256(), 0
    assert hasattr(f, "readline") and hasattr(f, "read")
    if "chunked" in fields.get("transfer-encoding", ""):
        while n := int(f.readline().split(b";")[0], 16):
            data = f.read(n)
            digest.update(data)
            size += len(data)
            f.readline()
        f.readline()  # the CRLF after the last chunk: no trailers
    else:
        left = int(fields.get("content-length", "0"))
        while left:
            data = f.read(min(left, BLOCK))
            digest.update(data)
            size, left = size + len(data), left - len(data)
    return size, digest.hexdigest()


@pytest.fixture
def hashing_upstream() -> Iterator[str]:
    """Answers every request with the size and sha256 of the body it got, as JSON."""

    def serve(conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as f:
            while (line := f.readline()) and line.strip():
                head = [line]
                while (line := f.readline()).strip():
                    head.append(line)
                fields = {
                    k.strip().lower(): v.strip()
                    for k, _, v in (x.decode("latin-1").partition(":") for x in head[1:])
                }
                size, sha = read_body(f, fields)
                body = json.dumps({"bytes": size, "sha256": sha}).encode()
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    b"content-length: %d\r\n\r\n%s" % (len(body), body)
                )

    with serving(serve) as url:
        yield url


def upload(url: str, size: int, *, chunked: bool) -> tuple[str, httpx.Response]:
    """POST ``size`` bytes made on the fly; returns their sha256 and the response."""
    block = bytes(range(256)) * (BLOCK // 256)
    digest = hashlib.sha256()

    def body() -> Iterator[bytes]:
        for i in range(size // BLOCK):
            data = i.to_bytes(8, "big") + block[8:]  # no two blocks alike
            digest.update(data)
            yield data

    framing = {"transfer-encoding": "chunked"} if chunked else {"content-length": str(size)}
    headers = {"content-type": "application/octet-stream", **framing}
    # httpx frames a generator as chunked itself; with a length it sends it as given.
    r = httpx.post(url + "/v1/files", content=body(), headers=headers, timeout=60)
    return digest.hexdigest(), r


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_an_upload_over_the_bound_streams_through_and_replays(
    tmp_path: Path, confdir: Path, recorders: Recorders, hashing_upstream: str, chunked: bool
) -> None:
    db = str(tmp_path / "tape.db")
    proc = recorders.start(db, "--mode", f"reverse:{hashing_upstream}")
    started = peak_rss(proc.proc.pid)
    sha, r = upload(proc.url, UPLOAD, chunked=chunked)
    grown = peak_rss(proc.proc.pid) - started
    assert r.status_code == 200, r.text
    assert r.json() == {"bytes": UPLOAD, "sha256": sha}  # the upstream got every byte
    assert proc.stop() == 0, proc.log.decode()
    print(f"proxy peak RSS grew {grown >> 20} MiB (from {started >> 20}) for {UPLOAD >> 20} MiB")
    assert grown < PROXY_GROWTH, f"the proxy's peak grew {grown >> 20} MiB"
    with Store.open(db, create=False) as store:
        [x] = Queries(store).exchanges()
        assert x.state == "completed"
        assert x.request_body is not None
        stand_in = {"ssetape_body_not_stored": {"bytes": UPLOAD, "sha256": sha}}
        assert orjson.loads(x.request_body) == stand_in
    # The same upload is known again: replay matches it by its stand-in.
    replay = start_ssetape(
        ["replay", "--db", db, "--port", "0", "--mode", f"reverse:{hashing_upstream}"], db=db
    )
    try:
        _, again = upload(replay.url, UPLOAD, chunked=not chunked)
        assert again.status_code == 200, again.text
        assert again.json() == {"bytes": UPLOAD, "sha256": sha}
    finally:
        assert replay.stop() == 0, replay.log.decode()


def test_an_upload_the_upstream_refuses_before_its_end_is_recorded(
    tmp_path: Path, recorders: Recorders
) -> None:
    """A 413 (or a 401) sent as soon as the head is in, while the body still streams: the
    client gets it and the exchange is stored with what of the body had passed."""

    def refuse(conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as f:
            while f.readline().strip():
                pass
            body = b'{"error": "too large"}'
            conn.sendall(
                b"HTTP/1.1 413 Payload Too Large\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body)
            )
            time.sleep(0.5)  # a lingering close, as servers do: no reset before the answer

    db = str(tmp_path / "tape.db")
    with serving(refuse) as url:
        proc = recorders.start(db, "--mode", f"reverse:{url}")
        try:
            _, r = upload(proc.url, UPLOAD, chunked=False)
            assert r.status_code == 413
        except httpx.TransportError:  # the upstream hung up mid-upload: the client may see it
            pass
        assert proc.stop() == 0, proc.log.decode()
    with Store.open(db, create=False) as store:
        [x] = Queries(store).exchanges()
        assert (x.state, x.status) == ("completed", 413)
        assert x.error is not None and "upstream answered after" in x.error
        assert x.request_body is not None
        sent = orjson.loads(x.request_body)["ssetape_body_not_stored"]["bytes"]
        assert 0 <= sent < UPLOAD  # what had passed when the answer came: maybe none


def test_a_small_chunked_body_is_stored_and_redacted_as_before(
    tmp_path: Path, recorders: Recorders, hashing_upstream: str
) -> None:
    """Of unknown length, a body streams through the tap too: stored whole when small."""
    db = str(tmp_path / "tape.db")
    proc = recorders.start(
        db, "--mode", f"reverse:{hashing_upstream}", "--set", "ssetape_redact_field=secret"
    )
    doc = {"model": "m", "secret": "hunter2"}
    r = httpx.post(proc.url + "/v1/chat/completions", content=iter([orjson.dumps(doc)]), timeout=10)
    assert r.json()["bytes"] == len(orjson.dumps(doc))
    assert proc.stop() == 0, proc.log.decode()
    with Store.open(db, create=False) as store:
        [x] = Queries(store).exchanges()
        assert x.request_body is not None
        stored = orjson.loads(x.request_body)
        assert stored["model"] == "m" and stored["secret"] != "hunter2"


def trickler(port: int) -> socket.socket:
    """A full request head, then one byte of its 1,000-byte body."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
        b"content-length: 1000\r\n\r\n{"
    )
    return s


def test_a_trickled_body_does_not_hold_the_proxy(
    tmp_path: Path, recorders: Recorders, hashing_upstream: str
) -> None:
    timeout, cap = 2, 4
    db = str(tmp_path / "tape.db")
    proc = recorders.start(
        db, "--mode", f"reverse:{hashing_upstream}",
        "--set", f"ssetape_header_timeout={timeout}", "--set", f"ssetape_max_connections={cap}",
    )  # fmt: skip
    port = int(proc.url.rsplit(":", 1)[1])
    held = [trickler(port) for _ in range(cap)]
    try:
        time.sleep(0.5)  # every head is in: before, each counted as busy for good
        for s in held:
            s.sendall(b" ")  # the body moves, a byte at a time
        # At the cap, a normal client is served: it closes the connection waiting longest.
        r = httpx.post(proc.url + "/v1/chat/completions", json={"q": 1}, timeout=10)
        assert r.status_code == 200 and r.json()["bytes"] == len(b'{"q":1}')
        # The others are closed once the header timeout passes, trickling or not.
        deadline = time.monotonic() + timeout * 5
        while time.monotonic() < deadline:
            for s in held:
                with contextlib.suppress(OSError):  # closed already
                    s.sendall(b" ")
            if all(closed_by_peer(s) for s in held):
                break
            time.sleep(0.5)
        still = [s for s in held if not closed_by_peer(s)]
        assert not still, f"{len(still)} trickling connections still open"
    finally:
        for s in held:
            s.close()
    assert proc.stop() == 0, proc.log.decode()
    assert "Traceback" not in proc.log.decode()
    with Store.open(db, create=False) as store:
        assert (
            wait_for(lambda: [x.state for x in Queries(store).exchanges()]).count("completed") == 1
        )
