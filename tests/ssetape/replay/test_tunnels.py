"""Forward-mode tunnels of the direct replay server, in process: CONNECT, TLS with leaf
certificates from the confdir's CA, then HTTP/1.1 or HTTP/2 as the client chooses. The
responder answers in typed parts, as the player does; each side must carry them whole (HTTP/2
within the client's flow-control window), and end a cut response as a cut."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ssetape.replay.admission import Admission
from ssetape.replay.http_server import HttpServer
from ssetape.replay.leaf_certificates import LeafCertificates
from ssetape.replay.responder import ResponseWriter
from ssetape.replay.response_parts import END, Body, Head, Part

SERVERS: dict[str, HttpServer] = {}
BIG = bytes(range(256)) * 1200  # 300 KiB: several times HTTP/2's initial window (64 KiB)


def sized(body: bytes) -> tuple[Part, ...]:
    return Head(200, b"OK", ((b"content-length", b"%d" % len(body)),)), Body(0, body), END


async def respond(
    out: ResponseWriter[Any],
    line: list[bytes],
    headers: dict[bytes, bytes],
    body: bytes,
    at: float,
) -> bool:
    """What a replay server writes, chosen by path; the request line is echoed back."""
    path = line[1].split(b"/", 3)[-1]
    if path == b"big":
        out.send(sized(BIG))
    elif path == b"chunked":
        fields = ((b"content-type", b"text/event-stream"), (b"connection", b"keep-alive"))
        out.send((Head(200, b"OK", fields, chunked=True),))
        for i in range(3):
            await asyncio.sleep(0.01)
            out.send((Body(0, b"data: %d\n\n" % i),))
        out.send((END,))
    elif path == b"cut":
        out.send((Head(200, b"OK", chunked=True), Body(0, b"hello")))
        await out.drain()
        out.abort()  # the recording ended here
        return False
    else:
        echo = b" ".join(line) + b" " + headers.get(b"host", b"") + b" " + body
        out.send(sized(echo))
    await out.drain()
    return True


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ssl.SSLContext]]:
    confdir = tmp_path_factory.mktemp("conf")
    leaves = LeafCertificates(confdir)
    server = HttpServer(respond, tls=leaves)
    loop = asyncio.new_event_loop()
    port = loop.run_until_complete(server.start("127.0.0.1", 0))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    SERVERS[f"http://127.0.0.1:{port}"] = server
    yield (
        f"http://127.0.0.1:{port}",
        ssl.create_default_context(cafile=Path(confdir) / "mitmproxy-ca-cert.pem"),
    )
    asyncio.run_coroutine_threadsafe(server.stop(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    leaves.close()


@pytest.mark.parametrize("http2", [False, True], ids=["http1", "http2"])
def test_a_tunnel_carries_requests_named_by_its_host(
    proxy: tuple[str, ssl.SSLContext], http2: bool
) -> None:
    url, ca = proxy
    with httpx.Client(proxy=url, verify=ca, http2=http2, timeout=10) as c:
        for host in ("api.example.com", "127.0.0.1"):  # a name and an address: both verify
            r = c.post(f"https://{host}:8443/v1/echo?x=1", content=b"hi")
            proto = b"HTTP/2" if http2 else b"HTTP/1.1"
            assert r.content.split(b" ")[:3] == [
                b"POST",
                f"https://{host}:8443/v1/echo?x=1".encode(),
                proto,
            ]
            assert r.content.endswith(b" hi") and r.http_version == proto.decode()
        # Plain HTTP through the same proxy: the absolute-form request as the client sent it.
        assert c.get("http://api.example.com/v1/echo").content.startswith(
            b"GET http://api.example.com/v1/echo HTTP/1.1"
        )


@pytest.mark.parametrize("http2", [False, True], ids=["http1", "http2"])
def test_bodies_past_the_window_and_chunked_streams_arrive_whole(
    proxy: tuple[str, ssl.SSLContext], http2: bool
) -> None:
    url, ca = proxy
    with httpx.Client(proxy=url, verify=ca, http2=http2, timeout=10) as c:
        assert c.get("https://api.example.com/big").content == BIG
        with c.stream("GET", "https://api.example.com/chunked") as r:
            pieces = list(r.iter_raw())
        assert b"".join(pieces) == b"data: 0\n\ndata: 1\n\ndata: 2\n\n"
        assert "transfer-encoding" not in r.headers or not http2
        # Several streams at once on one HTTP/2 connection.
        assert c.get("https://api.example.com/big").content == BIG


@pytest.mark.parametrize("http2", [False, True], ids=["http1", "http2"])
def test_a_cut_response_is_a_cut_not_an_end(proxy: tuple[str, ssl.SSLContext], http2: bool) -> None:
    url, ca = proxy
    with (
        httpx.Client(proxy=url, verify=ca, http2=http2, timeout=10) as c,
        pytest.raises(httpx.RemoteProtocolError),
        c.stream("GET", "https://api.example.com/cut") as r,
    ):
        r.read()


def test_a_client_that_does_not_trust_the_ca_is_refused_and_counted(
    proxy: tuple[str, ssl.SSLContext],
) -> None:
    url, _ = proxy
    before = SERVERS[url].refused_tls
    with httpx.Client(proxy=url, timeout=10) as c, pytest.raises(httpx.ConnectError):
        c.get("https://api.example.com/v1/echo")  # the system's CAs only
    deadline = time.monotonic() + 10
    while SERVERS[url].refused_tls == before and time.monotonic() < deadline:
        time.sleep(0.01)  # the server hears of it once the client has hung up
    assert SERVERS[url].refused_tls == before + 1


@contextlib.contextmanager
def own_proxy(confdir: Path, admission: Admission) -> Iterator[tuple[str, ssl.SSLContext]]:
    """A forward-mode server of its own (its counts are no other test's business)."""
    leaves = LeafCertificates(confdir)
    server = HttpServer(respond, tls=leaves, admission=admission)
    loop = asyncio.new_event_loop()
    port = loop.run_until_complete(server.start("127.0.0.1", 0))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield (
            f"http://127.0.0.1:{port}",
            ssl.create_default_context(cafile=confdir / "mitmproxy-ca-cert.pem"),
        )
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        leaves.close()


def stall(url: str) -> socket.socket:
    """A client that opens a tunnel and never sends its TLS hello."""
    s = socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=10)
    s.sendall(b"CONNECT api.example.com:443 HTTP/1.1\r\nhost: api.example.com\r\n\r\n")
    return s


def test_clients_that_stall_in_their_handshake_do_not_hold_up_the_others(tmp_path: Path) -> None:
    """Tunnels are answered a few handshakes at a time (``Admission``): ten clients that
    open one and never send their TLS hello must not keep an honest client waiting for the
    handshake timeout (60 s)."""
    with own_proxy(tmp_path, Admission()) as (url, ca):
        stalled = [stall(url) for _ in range(10)]
        try:
            with httpx.Client(proxy=url, verify=ca, timeout=10) as c:
                r = c.post("https://api.example.com/v1/echo", content=b"hi")
                assert r.content.endswith(b" hi")
        finally:
            for s in stalled:
                s.close()


def test_a_client_on_this_machine_waits_for_a_handshake_slot(tmp_path: Path) -> None:
    """The slots apply to clients on this machine (the kernel's round trip on loopback is
    tens of microseconds): with one slot held by a client that stalls in its handshake, an
    honest client is let in only when the slot's hold (here 0.5 s) is up."""
    with own_proxy(tmp_path, Admission(slots=1, hold=0.5)) as (url, ca):
        stalled = stall(url)
        try:
            assert stalled.recv(100).startswith(b"HTTP/1.1 200")  # it has the slot
            t = time.monotonic()
            with httpx.Client(proxy=url, verify=ca, timeout=10) as c:
                r = c.post("https://api.example.com/v1/echo", content=b"hi")
                assert r.content.endswith(b" hi")
            assert time.monotonic() - t >= 0.3  # it waited for the stalled client's slot
        finally:
            stalled.close()


def test_http2_in_clear_text_with_prior_knowledge(proxy: tuple[str, ssl.SSLContext]) -> None:
    """A client that speaks HTTP/2 from its first byte, without TLS (h2c, as httpx with
    ``http1=False`` or gRPC-style clients do to a local server): the request is the path with
    its :authority as host, as an HTTP/1.1 client's would be, and bodies arrive whole."""
    url, _ = proxy
    authority = url.removeprefix("http://")
    with httpx.Client(http1=False, http2=True, timeout=10) as c:
        r = c.post(f"{url}/v1/echo?x=1", content=b"hi")
        assert r.http_version == "HTTP/2"
        assert r.content == f"POST /v1/echo?x=1 HTTP/2 {authority} hi".encode()
        assert c.get(f"{url}/big").content == BIG  # past the window, and a second stream
        with c.stream("GET", f"{url}/chunked") as s:
            assert b"".join(s.iter_raw()) == b"data: 0\n\ndata: 1\n\ndata: 2\n\n"
    # The same port still speaks HTTP/1.1 to everyone else.
    with httpx.Client(timeout=10) as c:
        assert c.get(f"{url}/v1/echo").content.startswith(b"GET /v1/echo HTTP/1.1")
