"""Long recordings on replay: played from the store a page at a time (the first byte does not
wait for the whole stream, nor does the stream sit in memory), and replay's start loads only as
many recordings as its cache holds by bytes."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from bench.tapes import build_stream
from ssetape.replay.http_server import HttpServer
from ssetape.replay.player import LAZY_ROWS, PLAY_PAGE, Player
from ssetape.replay.responder import ResponseWriter
from ssetape.storage.models import Exchange
from ssetape.storage.store import Store

EVENTS = LAZY_ROWS + 5 * PLAY_PAGE  # a long recording: seven or so pages
PAD = 2000  # bytes of each event: 30 MB in all, more than a socket holds


def raw(i: int) -> bytes:
    return b'data: {"i":%d%s}\n\n' % (i, b"x" * PAD)


def dechunk(body: bytes) -> bytes:
    out, at = [], 0
    while at < len(body):
        end = body.index(b"\r\n", at)
        size = int(body[at:end], 16)
        if size == 0:
            break
        out.append(body[end + 2 : end + 2 + size])
        at = end + 2 + size + 2
    return b"".join(out)


class Counted(Player):
    """A player that counts the pages it reads from the store."""

    pages = 0

    def _page(self, *args: object) -> list[tuple[int, int, bytes]]:
        self.pages += 1
        return super()._page(*args)  # type: ignore[arg-type]


async def replay(player: Player, xid: int, speed: float, pause: float = 0) -> tuple[bytes, int]:
    """The whole response to a client that reads its first bytes, then nothing for ``pause``
    seconds; and how many pages the player had read by the end of the pause."""

    async def respond(out: ResponseWriter[Any], line: list[bytes], *_: object) -> bool:
        return await player.play_recording(out, line[0], xid, time.monotonic(), speed)

    server = HttpServer(respond)
    port = await server.start("127.0.0.1", 0)
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 16)
    writer.write(b"POST /v1/x HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
    got = [await reader.read(1024)]
    await asyncio.sleep(pause)
    pages = getattr(player, "pages", 0)
    while data := await reader.read(1 << 20):
        got.append(data)
    writer.close()
    await server.stop()
    return b"".join(got), pages


@pytest.fixture(scope="module")
def long_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    db = str(tmp_path_factory.mktemp("long") / "long.db")
    build_stream(db, events=EVENTS, pad=PAD)
    return db


def test_speed_zero_sends_the_head_before_reading_the_stream_and_holds_a_page(
    long_db: str,
) -> None:
    """`replay --speed 0` of 200k events took 32 s to its first byte: the whole stream was
    merged piece by piece first. Now a client that reads nothing after the head holds the
    reading back after a page or two, and then gets every byte as recorded."""
    with Store.open(long_db) as store:
        player = Counted(store)
        body, pages_while_paused = asyncio.run(replay(player, 1, speed=0, pause=0.5))
        assert player.load(1).size == 0  # nothing of the stream is cached
    head, _, chunked = body.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK") and b"transfer-encoding: chunked" in head
    assert dechunk(chunked) == b"".join(map(raw, range(EVENTS)))
    assert chunked.endswith(b"0\r\n\r\n")
    all_pages = EVENTS // PLAY_PAGE + 1
    assert pages_while_paused <= all_pages // 2, (pages_while_paused, all_pages)
    assert player.pages == all_pages


def test_a_long_recording_with_a_gap_is_cut_there(long_db: str, tmp_path: Path) -> None:
    db = tmp_path / "gap.db"
    db.write_bytes(Path(long_db).read_bytes())
    gap = EVENTS - 7
    with Store.open(str(db)) as store:
        with store.engine.begin() as conn:
            conn.execute(update(Exchange).values(gap_seq=gap, error="the store failed"))
        body, _ = asyncio.run(replay(Player(store), 1, speed=0))
    head, _, chunked = body.partition(b"\r\n\r\n")
    assert b"x-ssetape-incomplete: from event #" in head.lower()
    assert dechunk(chunked) == b"".join(map(raw, range(gap)))
    assert not chunked.endswith(b"0\r\n\r\n")  # cut, as the recording is


def test_a_long_recording_keeps_its_timing(tmp_path: Path) -> None:
    db = str(tmp_path / "timed.db")
    build_stream(db, events=LAZY_ROWS + 1, gap_us=20)  # 200 ms in all
    with Store.open(db) as store:
        t0 = time.perf_counter()
        body, _ = asyncio.run(replay(Player(store), 1, speed=1))
        took = time.perf_counter() - t0
    assert dechunk(body.partition(b"\r\n\r\n")[2]).count(b"data: ") == LAZY_ROWS + 1
    assert took >= 0.2  # not sooner than recorded (and 2 s, said at speed 0, is the bound)


def test_start_loads_recordings_until_the_cache_is_full_by_bytes(tmp_path: Path) -> None:
    """Replay's start loaded 256 recordings whatever their size (448 MiB before the first
    request with five 60 MiB recordings): now the newest first, until the cache is full."""
    db = str(tmp_path / "five.db")
    ids = [build_stream(db, events=1000, pad=2000, text=f"r{i}") for i in range(5)]  # 2 MB
    with Store.open(db) as store:
        player = Player(store, cache_bytes=5 << 20)
        player.preload(ids)
        assert 3 << 20 <= player.held <= 5 << 20  # two of 2 MB
        cached = [xid for xid, _ in player._cache]
        assert sorted(cached) == ids[-2:]  # the newest
        # A long recording costs the cache nothing: it is read as it plays.
        long_id = build_stream(db, events=EVENTS, pad=10)
        player.preload([long_id])
        assert player.load(long_id).size == 0
