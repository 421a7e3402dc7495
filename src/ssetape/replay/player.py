"""Plays stored recordings back with their timing: the one place replay timing lives.

Every replay server (the timed server behind the replayer addon, the direct front, the pytest
plugin's cassette front) matches a request its own way, then hands the recording to a
:class:`Player`, which writes the recorded head and body pieces at their recorded offsets
from ``t0`` (the moment the whole request was in, offset zero of every recording). Deadlines
are absolute (the loop's clock), so late wake-ups never add up.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from sqlalchemy import select

from ssetape.replay.http_server import error_response
from ssetape.replay.playback import Playback
from ssetape.storage.models import Chunk, Event, Exchange
from ssetape.storage.store import Store

__all__ = ["Player"]

log = logging.getLogger("ssetape.replay")


class Player:
    """Loads recordings from a store (one query each, kept in a small cache) and plays them.

    A recording that misses something is played up to its first gap (``allow_gaps``: past
    them) with a header that says so; ``on_incomplete`` hears of each such replay.
    """

    def __init__(
        self,
        store: Store,
        *,
        cache_size: int = 256,
        allow_gaps: bool = False,
        on_incomplete: Callable[[int, str], object] | None = None,
    ) -> None:
        self.store = store
        self.allow_gaps = allow_gaps
        self.on_incomplete = on_incomplete
        self._cache: OrderedDict[tuple[int, bool], Playback] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()  # loads run in executor threads

    def load(self, exchange_id: int, allow_gaps: bool | None = None) -> Playback:
        """The recording, ready to play (LookupError if it has no response); blocks on the
        store unless cached: call it off the event loop."""
        key = (exchange_id, self.allow_gaps if allow_gaps is None else allow_gaps)
        with self._lock:
            playback = self._cache.get(key)
            if playback is None:
                playback = self._read(*key)
                self._cache[key] = playback
                if len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
            self._cache.move_to_end(key)
            return playback

    def _read(self, exchange_id: int, allow_gaps: bool) -> Playback:
        with self.store.Session() as s:
            x = s.get(Exchange, exchange_id)
            if x is None or x.status is None:
                raise LookupError(f"exchange {exchange_id} has no recorded response")
            events = s.scalars(
                select(Event).where(Event.exchange_id == exchange_id).order_by(Event.seq)
            )
            chunks = s.scalars(
                select(Chunk).where(Chunk.exchange_id == exchange_id).order_by(Chunk.seq)
            )
            return Playback.of(x, list(events), list(chunks), allow_gaps=allow_gaps)

    async def play_recording(
        self,
        writer: asyncio.StreamWriter,
        method: bytes,
        xid: int,
        t0: float,
        speed: float,
        allow_gaps: bool | None = None,
    ) -> bool:
        """Play exchange ``xid`` (an error answer if it cannot be read); False to close."""
        loop = asyncio.get_running_loop()
        gaps = self.allow_gaps if allow_gaps is None else allow_gaps
        try:
            # A cached recording needs no thread hop (a plain dict read is atomic).
            playback = self._cache.get((xid, gaps))
            if playback is None:
                playback = await loop.run_in_executor(None, self.load, xid, gaps)
        except LookupError as e:
            error_response(writer, 500, f"ssetape replay: {e}")
            return True
        except Exception as e:  # the store failed: say so, keep serving
            log.exception("ssetape replay: cannot load a recording")
            error_response(writer, 503, f"ssetape: cannot read the recording: {e}")
            return True
        if playback.incomplete is not None:
            log.warning("ssetape: replaying #%d, which is incomplete: %s", xid, playback.incomplete)
            if self.on_incomplete is not None:
                self.on_incomplete(xid, playback.incomplete)
        return await self.play(writer, method, playback, t0, speed)

    async def play(
        self,
        writer: asyncio.StreamWriter,
        method: bytes,
        playback: Playback,
        t0: float,
        speed: float,
    ) -> bool:
        """Write ``playback`` with its recorded timing from ``t0`` (a ``time.time()`` value)."""
        loop = asyncio.get_running_loop()
        # Deadlines are absolute (loop clock), so late wake-ups never add up.
        base = loop.time() - (time.time() - t0)

        async def at(offset: float) -> None:
            if speed > 0:
                delay = base + offset / speed - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)

        await at(playback.ttfb)
        if method == b"HEAD" or playback.status in (204, 304) or playback.status < 200:
            writer.write(playback.head_no_body)
            await writer.drain()
            return True
        if not playback.stream:
            await at(playback.pieces[0][0])
            if not playback.complete:  # the body never fully arrived when recording
                writer.write(playback.head)
                writer.transport.abort()
                return False
            writer.write(playback.head + playback.pieces[0][1])
            await writer.drain()
            return True
        return await self._play_stream(writer.transport, playback, base, speed)

    async def _play_stream(
        self, transport: asyncio.BaseTransport, playback: Playback, base: float, speed: float
    ) -> bool:
        """Every write is a timer callback at its absolute deadline: no coroutine per event,
        nothing that can drift; writes due at the same moment go out as one."""
        assert isinstance(transport, asyncio.WriteTransport)
        loop = asyncio.get_running_loop()
        plan: list[tuple[float, bytes]] = []
        for offset, data in ((playback.ttfb, playback.head), *playback.pieces):
            when = base + offset / speed if speed > 0 else 0.0
            if plan and when <= plan[-1][0]:  # the heap does not keep equal deadlines in order
                plan[-1] = (plan[-1][0], plan[-1][1] + data)
            else:
                plan.append((when, data))
        tail = b"0\r\n\r\n" if playback.complete else b""
        done: asyncio.Future[bool] = loop.create_future()
        handles: list[asyncio.TimerHandle] = []

        def emit(data: bytes, last: bool) -> None:
            if transport.is_closing():  # the client left: stop writing to it
                for h in handles:
                    h.cancel()
                if not done.done():
                    done.set_result(False)
                return
            transport.write(data + tail if last else data)
            if last:
                if not playback.complete:
                    transport.abort()  # the recording ended here: end the replay the same way
                done.set_result(playback.complete)

        if speed > 0:
            handles += [
                loop.call_at(when, emit, data, i == len(plan) - 1)
                for i, (when, data) in enumerate(plan)
            ]
        else:
            emit(b"".join(data for _, data in plan), True)
        try:
            return await done
        finally:
            for h in handles:
                h.cancel()
