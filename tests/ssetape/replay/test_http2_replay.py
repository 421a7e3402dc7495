"""A recording replayed over HTTP/2 is sent from its parts, not from HTTP/1.1 text read back: the
longest stream played from memory, at ``--speed 0`` (one write of everything), arrives whole
and never holds the server's event loop (every other stream it plays) for long.

Reading the HTTP/1.1 text back cost time in the square of the stream's length (each chunk
parsed cut the rest of the text anew): 4 MB in 10,000 events held the loop for 1.1-1.5 s on
the 2-core machine of the tests; sent from its parts, for 0.2 s (h2's own framing of 10,000
DATA frames, which it always cost)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from ssetape.replay.http_server import HttpServer
from ssetape.replay.player import LAZY_BYTES, LAZY_ROWS, Player
from ssetape.storage.store import Store
from ssetape.storage.writer import Writer

ROWS = LAZY_ROWS  # the longest recording a player holds in memory
EVENT = LAZY_BYTES // LAZY_ROWS - 20  # bytes of each event: just under its bytes limit too


def event(i: int) -> bytes:
    data = b'data: {"i":%d}' % i
    return data + b"x" * (EVENT - len(data) - 2) + b"\n\n"


def record_long(store: Store) -> None:
    w = Writer(store)
    w.start()
    w.begin(
        "c" * 32, started_at=datetime.now(UTC), method="GET", scheme="https",
        host="api.example", port=443, path="/v1/x", query="", http_version="HTTP/1.1",
        request_headers=[], request_body=b"", fingerprint="f" * 64,
    )  # fmt: skip
    headers = [["content-type", "text/event-stream"], ["transfer-encoding", "chunked"]]
    w.update("c" * 32, status=200, reason="OK", response_headers=headers, ttfb_us=1000,
             is_stream=True)  # fmt: skip
    for start in range(0, ROWS, 1000):  # each event its own read: its own piece
        w.add_events("c" * 32, [(i, (i + 1) * 1000, "message", None, None, event(i))
                                for i in range(start, start + 1000)])  # fmt: skip
    w.finish("c" * 32, state="completed", duration_us=(ROWS + 1) * 1000)
    assert w.flush()
    w.close()


class Served:
    """A replay server on its own loop and thread, and the longest that loop was held."""

    def __init__(self, player: Player) -> None:
        async def respond(out: Any, line: list[bytes], *_: object) -> bool:
            return await player.play_recording(out, line[0], 1, time.monotonic(), 0)

        self.server = HttpServer(respond)
        self.loop = asyncio.new_event_loop()
        self.port = self.loop.run_until_complete(self.server.start("127.0.0.1", 0))
        self.held = 0.0
        self.ticker = self.loop.create_task(self._tick())
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    async def _tick(self) -> None:
        while True:
            before = self.loop.time()
            await asyncio.sleep(0.005)
            self.held = max(self.held, self.loop.time() - before - 0.005)

    def stop(self) -> None:
        async def stop() -> None:
            self.ticker.cancel()
            await self.server.stop()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    store = Store.open(str(tmp_path / "t.db"))
    record_long(store)
    player = Player(store)
    assert player.load(1).source is None  # played from memory, not a page at a time
    s = Served(player)
    yield s
    s.stop()
    store.close()


def test_the_longest_stream_at_speed_zero_over_http2_holds_the_loop_briefly(
    served: Served,
) -> None:
    url = f"http://127.0.0.1:{served.port}/v1/x"
    with httpx.Client(http1=False, http2=True, timeout=60) as c:  # HTTP/2 in clear text
        r = c.get(url)
    assert r.http_version == "HTTP/2" and r.status_code == 200
    assert r.content == b"".join(event(i) for i in range(ROWS))  # whole, in order
    with httpx.Client(timeout=60) as c:  # the same bytes over HTTP/1.1
        assert c.get(url).content == r.content
    # Room for a busy machine, and well under what reading the text back cost.
    assert served.held < 0.6, served.held
