"""The player: recorded bytes back on a real socket, each piece at its recorded offset from
offset zero, however late the request was handled, and a cut recording cut the same way."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from ssetape.matching import placeholder
from ssetape.replay.http_server import HttpServer, read_body
from ssetape.replay.player import Player
from ssetape.replay.responder import Responder, ResponseWriter
from ssetape.replay.response_parts import END, Head
from ssetape.storage.store import Store
from ssetape.storage.writer import Writer
from ssetape.vocabulary import MAX_BODY

OFFSETS_MS = [0, 40, 40, 120, 250]  # two events in one read stay one write


def record(store: Store, uid: str, *, state: str) -> None:
    w = Writer(store)
    w.start()
    w.begin(
        uid, started_at=datetime.now(UTC), method="POST", scheme="https", host="api.example",
        port=443, path="/v1/x", query="", http_version="HTTP/1.1", request_headers=[],
        request_body=b"{}", fingerprint="f" * 64,
    )  # fmt: skip
    headers = [["content-type", "text/event-stream"], ["transfer-encoding", "chunked"]]
    w.update(uid, status=200, reason="OK", response_headers=headers, ttfb_us=20_000,
             is_stream=True)  # fmt: skip
    rows = [(i, ms * 1000, "message", str(i), None, b"data: %d\n\n" % i)
            for i, ms in enumerate(OFFSETS_MS)]  # fmt: skip
    w.add_events(uid, rows)
    w.finish(uid, state=state, duration_us=OFFSETS_MS[-1] * 1000)
    assert w.flush()
    w.close()


async def replay(player: Player, xid: int, speed: float, late: float) -> list[tuple[float, bytes]]:
    """Play exchange ``xid`` to a real client; ``late``: how long before the request was
    handled its offset zero was (the proxy measured it)."""
    t0 = time.monotonic() - late

    async def respond(out: ResponseWriter[Any], line: list[bytes], *_: object) -> bool:
        return await player.play_recording(out, line[0], xid, t0, speed)

    server = HttpServer(respond)
    port = await server.start("127.0.0.1", 0)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /v1/x HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
    got: list[tuple[float, bytes]] = []
    while data := await reader.read(65536):  # until the server closes
        got.append((time.monotonic() - t0, data))
    writer.close()
    await server.stop()
    return got


@pytest.fixture
def player(tmp_path: Path) -> Player:
    store = Store.open(str(tmp_path / "t.db"))
    record(store, "a" * 32, state="completed")
    record(store, "b" * 32, state="truncated")
    return Player(store)


def test_pieces_arrive_at_their_offsets_from_offset_zero(player: Player) -> None:
    late = 0.15
    # Loaded first: `late` stands for the time the request took to be handled, and a first
    # read of the store on a loaded 2-core machine took 54 ms once, and 760 ms another time.
    player.load(1)
    got = asyncio.run(replay(player, 1, speed=1.0, late=late))
    body = b"".join(d for _, d in got)
    assert body.startswith(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n")
    assert body.endswith(b"0\r\n\r\n") and body.count(b"data: ") == 5
    # Offsets count from when the request was complete, not from when it was handled: what
    # was due by then goes at once, the rest on time (the 250 ms event would come 150 ms
    # late, past the margin, if counted from the handling). No event comes before the head
    # (recorded 20 ms in). The margin is for a loaded 2-core machine.
    for i, ms in enumerate(OFFSETS_MS):
        at = next(at for at, data in got if b"data: %d\n" % i in data)
        due = max(ms / 1000, 0.02, late)
        assert due - 0.005 <= at <= due + 0.1, (i, at, due)
    # Events that arrived in one read are written at once, as recorded.
    assert any(b"data: 1\n\ndata: 2\n\n" in data for _, data in got)


def test_speed_zero_is_everything_at_once_and_two_is_twice_as_fast(player: Player) -> None:
    instant = asyncio.run(replay(player, 1, speed=0, late=0))
    assert instant[-1][0] < 0.1
    fast = asyncio.run(replay(player, 1, speed=2, late=0))
    assert 0.125 - 0.005 <= fast[-1][0] <= 0.125 + 0.05


def test_a_cut_recording_is_cut_on_replay(player: Player) -> None:
    got = asyncio.run(replay(player, 2, speed=0, late=0))
    body = b"".join(d for _, d in got)
    assert body.count(b"data: ") == 5 and not body.endswith(b"0\r\n\r\n")


def test_a_missing_recording_is_an_error_answer(player: Player) -> None:
    got = asyncio.run(replay(player, 99, speed=0, late=0))
    assert b"".join(d for _, d in got).startswith(b"HTTP/1.1 500 Error")


def test_a_client_that_never_finishes_its_head_is_let_go() -> None:
    """The replay servers' own bound on slow clients (`ssetape record` has the guard)."""

    async def respond(*_: object) -> bool:
        raise AssertionError("no request was complete")

    async def session(sent: bytes) -> tuple[bytes, float]:
        server = HttpServer(respond, head_timeout=0.3)
        port = await server.start("127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(sent)  # and nothing more
        t = time.monotonic()
        got = await asyncio.wait_for(reader.read(), 5)
        took = time.monotonic() - t
        writer.close()
        await server.stop()
        return got, took

    stalled_head = b"POST /v1/x HTTP/1.1\r\nhost: x\r\n"
    stalled_body = b'POST /v1/x HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\n{"a'
    for sent in (stalled_head, stalled_body):
        got, took = asyncio.run(session(sent))
        assert got == b"" and 0.25 < took < 2  # closed, without an answer, once its time was up


def timed_responder(
    waited: list[float], first: Callable[[], Awaitable[None]], *, keep: bool
) -> Responder:
    """A responder that notes how long after its offset zero each request is served, and
    runs ``first`` before answering the first one."""

    async def respond(out: ResponseWriter[Any], *args: object) -> bool:
        at = args[-1]
        assert isinstance(at, float)
        waited.append(time.monotonic() - at)
        if len(waited) == 1:
            await first()
        out.send((Head(204, b"No Content"), END))
        return keep

    return respond


def test_requests_that_arrive_together_are_timed_from_their_arrival() -> None:
    """Offset zero is when a request arrived, not when the server got round to it: two
    requests read in one turn of the loop, the first of which keeps the loop busy for 0.3 s,
    and the second is still timed from its arrival (the recorded timing is not shifted by the
    work before it)."""
    loop = asyncio.new_event_loop()
    waited: list[float] = []

    async def busy() -> None:
        time.sleep(0.3)  # the loop is busy with other streams

    server = HttpServer(timed_responder(waited, busy, keep=False))
    port = loop.run_until_complete(server.start("127.0.0.1", 0))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    blocked, both_sent = threading.Event(), threading.Event()

    def block() -> None:  # both requests arrive while the loop is away
        blocked.set()
        both_sent.wait(10)

    loop.call_soon_threadsafe(block)
    assert blocked.wait(10)
    clients = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(2)]
    for c in clients:
        c.sendall(b"GET /v1/x HTTP/1.1\r\nhost: x\r\n\r\n")
    time.sleep(0.05)  # in the kernel's buffers, both readable when the loop looks next
    both_sent.set()
    try:
        for c in clients:
            assert c.recv(100).startswith(b"HTTP/1.1 204")
    finally:
        for c in clients:
            c.close()
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
    assert max(waited) >= 0.25  # served 0.3 s after it arrived, and timed from its arrival


def test_a_request_pipelined_behind_a_long_answer_is_timed_from_its_turn() -> None:
    """HTTP/1.1 answers in order: a request sent in the same bytes as one whose answer takes
    0.3 s cannot have its recorded timing start before that answer ends (it would arrive in
    one burst)."""
    waited: list[float] = []

    async def streaming() -> None:
        await asyncio.sleep(0.3)  # the first answer streams for a while

    async def main() -> bytes:
        server = HttpServer(timed_responder(waited, streaming, keep=True))
        port = await server.start("127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /v1/a HTTP/1.1\r\nhost: x\r\n\r\n" * 2)  # pipelined
        got = b""
        while got.count(b"204") < 2:
            got += await asyncio.wait_for(reader.read(100), 10)
        writer.close()
        await server.stop()
        return got

    asyncio.run(main())
    assert len(waited) == 2 and waited[1] < 0.2  # timed from its turn, not from 0.3 s earlier


@pytest.mark.parametrize("size", [10, MAX_BODY, MAX_BODY + 5])
def test_a_request_body_reads_as_the_recorder_stored_it(size: int) -> None:
    """Kept up to MAX_BODY, its stand-in past it (size and SHA-256, as the recorder stores
    it), whether sent with a length or chunked."""
    body = bytes(range(256)) * (size // 256) + b"x" * (size % 256)

    async def read(framing: bytes, data: bytes) -> bytes:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        return await read_body(
            reader,
            {b"transfer-encoding" if framing else b"content-length": framing or str(size).encode()},
        )

    chunked = (
        b"".join(
            b"%x\r\n%s\r\n" % (len(body[i : i + 70_000]), body[i : i + 70_000])
            for i in range(0, size, 70_000)
        )
        + b"0\r\n\r\n"
    )
    want = body if size <= MAX_BODY else placeholder(body)
    assert asyncio.run(read(b"", body)) == want
    assert asyncio.run(read(b"chunked", chunked)) == want
