"""A replayed response is built once as typed parts and each protocol's writer frames them
itself: the same parts come out as exact HTTP/1.1 bytes (status line, header lines, chunked or
sized body) and as HTTP/2 HEADERS and DATA frames, read here by the ``h2`` library as a client
(the connection's own fields dropped, content-length honoured, a cut a reset)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import FrozenInstanceError
from datetime import UTC, datetime
from typing import Any

import pytest
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import DataReceived, ResponseReceived, StreamEnded, StreamReset

from ssetape.replay.http_server import HttpServer
from ssetape.replay.player import Player
from ssetape.replay.responder import ResponseWriter
from ssetape.replay.response_parts import END, Body, Head, Part, error_parts
from ssetape.storage.store import Store
from ssetape.storage.writer import Writer

EVENT_SOURCE = (b"Content-Type", b"text/event-stream")
INCOMPLETE = (b"x-ssetape-incomplete", b"from event #2: upstream: closed")  # colons in it
# What a responder sends, by path: its writes, in order; "cut" is aborted after its writes.
WRITES: dict[bytes, tuple[tuple[Part, ...], ...]] = {
    b"stream": (
        (Head(200, b"OK", (EVENT_SOURCE, INCOMPLETE, (b"Connection", b"keep-alive")), True),),
        (Body(0.1, b"data: 1\n\n"), Body(0.1, b"")),  # nothing to send: no chunk of 0
        (Body(0.2, b"data: 2\n\n"), END),
    ),
    b"sized": ((Head(429, b"Too Many Requests", ((b"content-type", b"application/json"),
                (b"content-length", b"2"), (b"retry-after", b"1.5"))), Body(0, b"{}"), END),),
    b"over": ((Head(200, b"OK", ((b"content-length", b"5"),)), Body(0, b"hello, world"), END),),
    b"cut": ((Head(200, b"", chunked=True), Body(0, b"hello")),),
}  # fmt: skip
HTTP1 = {
    b"stream": b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    b"x-ssetape-incomplete: from event #2: upstream: closed\r\nConnection: keep-alive\r\n"
    b"transfer-encoding: chunked\r\n\r\n9\r\ndata: 1\n\n\r\n9\r\ndata: 2\n\n\r\n0\r\n\r\n",
    b"sized": b"HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\n"
    b"content-length: 2\r\nretry-after: 1.5\r\n\r\n{}",
    b"cut": b"HTTP/1.1 200\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n",  # no last chunk
}


def test_parts_are_values_both_sides_import() -> None:
    head, body, end = error_parts(404, b'{"error":{}}', b"application/json", ((b"x-a", b"1"),))
    assert head == Head(404, b"Error", ((b"content-type", b"application/json"),
                                        (b"content-length", b"12"), (b"x-a", b"1")))  # fmt: skip
    assert body == Body(0.0, b'{"error":{}}') and end is END
    at, data = Body(0.25, b"x")  # a piece is its deadline and its bytes
    assert (at, data) == (0.25, b"x")
    with pytest.raises(FrozenInstanceError):
        head.status = 200  # type: ignore[misc]


def record(store: Store) -> None:
    """A stream with a reason phrase of several words and header values with colons in
    them; two events arrived in one read."""
    w = Writer(store)
    w.start()
    w.begin(
        "d" * 32, started_at=datetime.now(UTC), method="GET", scheme="https",
        host="api.example", port=443, path="/v1/x", query="", http_version="HTTP/1.1",
        request_headers=[], request_body=b"", fingerprint="f" * 64,
    )  # fmt: skip
    headers = [["Content-Type", "text/event-stream; charset=utf-8"], ["x-when", "12:00:01"],
               ["Transfer-Encoding", "chunked"], ["Connection", "keep-alive"]]  # fmt: skip
    w.update("d" * 32, status=200, reason="OK and streaming", response_headers=headers,
             ttfb_us=1000, is_stream=True)  # fmt: skip
    rows = [(i, us, "message", None, None, b"data: %d\n\n" % i)
            for i, us in enumerate([2000, 2000, 3000])]  # fmt: skip
    w.add_events("d" * 32, rows)
    w.finish("d" * 32, state="completed", duration_us=3000)
    assert w.flush()
    w.close()


@pytest.fixture(scope="module")
def port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A replay server: /play plays the recording, other paths send their WRITES."""
    store = Store.open(str(tmp_path_factory.mktemp("parts") / "t.db"))
    record(store)
    player = Player(store)

    async def respond(out: ResponseWriter[Any], line: list[bytes], *_: object) -> bool:
        path = line[1].rsplit(b"/", 1)[-1]
        if path == b"play":
            return await player.play_recording(out, line[0], 1, time.monotonic(), 0)
        for parts in WRITES[path]:
            out.send(parts)
            await asyncio.sleep(0.01)  # each its own write
        if path == b"cut":
            out.abort()
            return False
        return True

    server = HttpServer(respond)
    loop = asyncio.new_event_loop()
    bound = loop.run_until_complete(server.start("127.0.0.1", 0))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield bound
    asyncio.run_coroutine_threadsafe(server.stop(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    store.close()


def http1(port: int, path: bytes, method: bytes = b"GET") -> bytes:
    """Every byte the server sent for one request, until it closed the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"%s /%s HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n" % (method, path))
        got = b""
        with contextlib.suppress(ConnectionResetError):  # a cut may end so
            while data := s.recv(65536):
                got += data
        return got


def http2(port: int, path: bytes, method: bytes = b"GET") -> tuple[list[Any], list[Any]]:
    """(response header fields, the stream's events after them) of one HTTP/2 request in
    clear text, as the h2 library reads them as a client."""
    conn = H2Connection(H2Configuration(client_side=True, header_encoding=None))
    conn.initiate_connection()
    conn.send_headers(1, [(b":method", method), (b":path", b"/" + path), (b":scheme", b"http"),
                          (b":authority", b"x")], end_stream=True)  # fmt: skip
    headers: list[Any] = []
    events: list[Any] = []
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(conn.data_to_send())
        while not any(isinstance(e, StreamEnded | StreamReset) for e in events):
            data = s.recv(65536)
            assert data, "the connection closed before the stream ended"
            for ev in conn.receive_data(data):
                if isinstance(ev, ResponseReceived):
                    headers = list(ev.headers)
                elif isinstance(ev, DataReceived | StreamEnded | StreamReset):
                    events.append(ev)
                if isinstance(ev, DataReceived):
                    conn.acknowledge_received_data(ev.flow_controlled_length, 1)
            s.sendall(conn.data_to_send())
    return headers, events


def body(events: list[Any]) -> bytes:
    return b"".join(e.data for e in events if isinstance(e, DataReceived))


@pytest.mark.parametrize("path", sorted(HTTP1))
def test_http1_frames_the_parts_byte_for_byte(port: int, path: bytes) -> None:
    assert http1(port, path) == HTTP1[path]


def test_http2_frames_the_same_parts_as_headers_and_data(port: int) -> None:
    headers, events = http2(port, b"stream")
    # The connection's own fields are HTTP/1.1's: dropped, and no transfer-encoding.
    assert headers == [(b":status", b"200"), (b"content-type", b"text/event-stream"), INCOMPLETE]
    assert body(events) == b"data: 1\n\ndata: 2\n\n" and isinstance(events[-1], StreamEnded)
    headers, events = http2(port, b"sized")
    assert headers == [(b":status", b"429"), (b"content-type", b"application/json"),
                       (b"content-length", b"2"), (b"retry-after", b"1.5")]  # fmt: skip
    assert body(events) == b"{}" and isinstance(events[-1], StreamEnded)
    headers, events = http2(port, b"over")  # no more than its content-length says
    assert body(events) == b"hello" and isinstance(events[-1], StreamEnded)
    headers, events = http2(port, b"sized", b"HEAD")  # a head alone, ended
    assert headers[0] == (b":status", b"429") and body(events) == b""
    assert isinstance(events[-1], StreamEnded)
    headers, events = http2(port, b"cut")  # a cut is a reset, not an end
    assert body(events) == b"hello" and isinstance(events[-1], StreamReset)


def test_a_recording_replays_byte_for_byte_over_http1_and_whole_over_http2(port: int) -> None:
    """The reason phrase of several words and the values with colons, as recorded; the
    connection's own fields not; the events that arrived in one read, one chunk."""
    assert http1(port, b"play") == (
        b"HTTP/1.1 200 OK and streaming\r\nContent-Type: text/event-stream; charset=utf-8\r\n"
        b"x-when: 12:00:01\r\ntransfer-encoding: chunked\r\n\r\n"
        b"12\r\ndata: 0\n\ndata: 1\n\n\r\n9\r\ndata: 2\n\n\r\n0\r\n\r\n"
    )
    headers, events = http2(port, b"play")
    assert headers == [(b":status", b"200"),
                       (b"content-type", b"text/event-stream; charset=utf-8"),
                       (b"x-when", b"12:00:01")]  # fmt: skip
    assert body(events) == b"data: 0\n\ndata: 1\n\ndata: 2\n\n"
    assert isinstance(events[-1], StreamEnded)
    headers, events = http2(port, b"play", b"HEAD")
    assert headers[0] == (b":status", b"200") and body(events) == b""
