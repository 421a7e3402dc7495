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
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from ssetape.replay.faults import Fault, Faults, plan
from ssetape.replay.miss import Miss
from ssetape.replay.playback import Playback, Row, Source, timed_pieces
from ssetape.replay.request_index import Hit
from ssetape.replay.responder import ResponseWriter, error_response
from ssetape.replay.response_parts import END, Part
from ssetape.replay.ws_miss import FrameRules
from ssetape.replay.ws_player import WsPlayer
from ssetape.replay.ws_session import WsUpgrade, tell
from ssetape.storage.store import Store
from ssetape.storage.tape_reads import TapeReads
from ssetape.vocabulary import Header

__all__ = ["CACHE_BYTES", "LAZY_BYTES", "LAZY_ROWS", "BodyNotStored", "Player"]

log = logging.getLogger("ssetape.replay")
F = TypeVar("F")  # parts as the writer's protocol frames them


# A stream with more rows or bytes than this is played from the store a page at a time (its
# first byte then waits for one page, not for the whole stream), never held whole.
LAZY_ROWS = 10_000
LAZY_BYTES = 4 << 20
PLAY_PAGE = 2000  # rows of a long stream read at once
CACHE_BYTES = 64 << 20  # recorded bytes the cache of playbacks holds, at most


class BodyNotStored(LookupError):
    """The recording's response body was over ``ssetape_max_response_body``: only its size,
    hash and first bytes are stored, so there is no body to answer with."""

    def __init__(self, exchange_id: int, size: int, sha256: str | None) -> None:
        super().__init__(
            f"recording #{exchange_id}: its response body ({size} bytes, sha256 {sha256}) "
            "was over ssetape_max_response_body when recorded and is not stored whole; "
            "re-record it with a larger ssetape_max_response_body"
        )
        self.exchange_id = exchange_id


class Player:
    """Loads recordings from a store (kept in a cache bounded by count and by bytes) and
    plays them.

    A recording that misses something is played up to its first gap (``allow_gaps``: past
    them) with a header that says so; ``on_incomplete`` hears of each such replay.
    """

    def __init__(
        self,
        store: Store,
        *,
        cache_size: int = 256,
        cache_bytes: int = CACHE_BYTES,
        allow_gaps: bool = False,
        on_incomplete: Callable[[int, str], object] | None = None,
        faults: Faults | None = None,
        on_miss: Callable[[Miss], object] | None = None,
    ) -> None:
        self.store = store
        self._tape = TapeReads(store)
        self.faults = faults  # served on purpose (ssetape replay --fault)
        self.allow_gaps = allow_gaps
        self.on_incomplete = on_incomplete
        self._cache: OrderedDict[tuple[int, bool], Playback] = OrderedDict()
        self._cache_size = cache_size
        self._cache_bytes = cache_bytes
        self.held = 0  # bytes the cached playbacks hold
        self._lock = threading.Lock()  # loads run in executor threads
        # WebSocket sessions, for upgrade requests (played with the faults too); ``on_miss``
        # hears of their client frames that missed (the front counts them as its misses).
        self.sessions = WsPlayer(store, faults=faults, on_miss=on_miss or tell)

    def preload(self, ids: Sequence[int]) -> None:
        """Load recordings (``ids`` oldest first) newest first, until the cache is full by
        count or by bytes: the first burst of requests then pays nothing."""
        loaded: list[tuple[int, Playback]] = []
        room = self._cache_bytes
        for xid in reversed(ids[-self._cache_size :]):
            try:
                playback = self._read(xid, self.allow_gaps)
            except LookupError:
                continue
            if playback.size > room:
                break
            room -= playback.size
            loaded.append((xid, playback))
        with self._lock:
            for xid, playback in reversed(loaded):  # oldest first: the newest go out last
                self._keep((xid, self.allow_gaps), playback)
        self.sessions.preload(ids)

    def load(self, exchange_id: int, allow_gaps: bool | None = None) -> Playback:
        """The recording, ready to play (LookupError if it has no response); blocks on the
        store unless cached: call it off the event loop."""
        key = (exchange_id, self.allow_gaps if allow_gaps is None else allow_gaps)
        with self._lock:
            playback = self._cache.get(key)
            if playback is None:
                playback = self._read(*key)
                self._keep(key, playback)
            self._cache.move_to_end(key)
            return playback

    def _keep(self, key: tuple[int, bool], playback: Playback) -> None:  # with the lock held
        """Cache ``playback``; the least recently played go while there are too many or
        they hold too many bytes."""
        if key in self._cache:
            return
        self._cache[key] = playback
        self.held += playback.size
        while len(self._cache) > 1 and (
            len(self._cache) > self._cache_size or self.held > self._cache_bytes
        ):
            self.held -= self._cache.popitem(last=False)[1].size

    def _read(self, exchange_id: int, allow_gaps: bool) -> Playback:
        found = self._tape.recording(exchange_id, lazy_rows=LAZY_ROWS, lazy_bytes=LAZY_BYTES)
        x = found.exchange if found is not None else None
        if found is None or x is None or x.status is None:
            raise LookupError(f"exchange {exchange_id} has no recorded response")
        if x.response_body_bytes is not None:  # never answer a body cut short as whole
            raise BodyNotStored(exchange_id, x.response_body_bytes, x.response_body_sha256)
        if not x.is_stream:
            return Playback.of(x, (), allow_gaps=allow_gaps)
        if found.rows is None:
            return Playback.of(x, (), wire=found.wire, allow_gaps=allow_gaps, lazy=True)
        return Playback.of(x, found.rows, wire=found.wire, allow_gaps=allow_gaps)

    def _page(self, source: Source, after: int) -> list[Row]:
        """One page of a long recording's rows: those after seq ``after`` (in a thread)."""
        return self._tape.page(source.exchange_id, source.wire, after, source.stop, PLAY_PAGE)

    async def play_recording(
        self,
        out: ResponseWriter[Any],
        method: bytes,
        xid: int,
        t0: float,
        speed: float,
        allow_gaps: bool | None = None,
    ) -> bool:
        """Play exchange ``xid`` (an error answer if it cannot be read); False to close.

        A WebSocket upgrade (the writer carries its connection) that matched a recorded
        session gets the session; ``xid``'s rules (a lookup's :class:`Hit`) say how its
        client frames are matched."""
        loop = asyncio.get_running_loop()
        upgrade = getattr(out, "upgrade", None)
        if isinstance(upgrade, WsUpgrade):
            rules = xid.rules if isinstance(xid, Hit) else FrameRules()
            try:
                played = await self.sessions.play(upgrade, xid, t0, speed, rules)
            except Exception as e:  # the store failed: say so, keep serving
                log.exception("ssetape replay: cannot play a WebSocket session")
                if not upgrade.taken:  # still HTTP: answer as HTTP
                    error_response(out, 503, f"ssetape: cannot read the recording: {e}")
                return False
            if played is not None:
                return played
        gaps = self.allow_gaps if allow_gaps is None else allow_gaps
        try:
            # A cached recording needs no thread hop (a plain dict read is atomic).
            playback = self._cache.get((xid, gaps))
            if playback is None:
                playback = await loop.run_in_executor(None, self.load, xid, gaps)
        except BodyNotStored as e:
            log.warning("ssetape: cannot replay %s", e)
            if self.on_incomplete is not None:  # the pytest plugin fails the test with it
                self.on_incomplete(xid, str(e))
            why = ((Header.INCOMPLETE.raw, str(e).encode("ascii", "replace")),)
            error_response(out, 502, f"ssetape replay: {e}", extra=why)
            return True
        except LookupError as e:
            error_response(out, 500, f"ssetape replay: {e}")
            return True
        except Exception as e:  # the store failed: say so, keep serving
            log.exception("ssetape replay: cannot load a recording")
            error_response(out, 503, f"ssetape: cannot read the recording: {e}")
            return True
        if playback.incomplete is not None:
            log.warning("ssetape: replaying #%d, which is incomplete: %s", xid, playback.incomplete)
            if self.on_incomplete is not None:
                self.on_incomplete(xid, playback.incomplete)
        if self.faults and playback.rows_at is not None and method != b"HEAD":
            faults = self.faults.for_stream()
            if faults:
                # Off the cache: a faulted replay reads its rows afresh (tests, not bursts).
                faulted = await loop.run_in_executor(None, self._faulted, playback, faults, speed)
                return await self.play(out, method, faulted, t0, 1.0)  # already wall-clock
        return await self.play(out, method, playback, t0, speed)

    def _faulted(self, playback: Playback, faults: list[Fault], speed: float) -> Playback:
        """``playback`` with ``faults`` applied to its rows (read from the store)."""
        assert playback.rows_at is not None
        rows: list[Row] = []
        while page := self._page(playback.rows_at, rows[-1][0] if rows else -1):
            rows += page
            if len(page) < PLAY_PAGE:
                break
        at = plan(faults, playback.ttfb * 1e6, rows, speed=speed, complete=playback.complete,
                  api=playback.api, wire=playback.rows_at.wire)  # fmt: skip
        return replace(playback, ttfb=at.ttfb, pieces=at.pieces, complete=at.complete,
                       source=None, size=0)  # fmt: skip

    async def play(
        self,
        out: ResponseWriter[F],
        method: bytes,
        playback: Playback,
        t0: float,
        speed: float,
    ) -> bool:
        """Write ``playback`` with its recorded timing from ``t0`` (a ``time.monotonic()``
        value: see :func:`ssetape.recording.clock.monotonic_of`)."""
        loop = asyncio.get_running_loop()
        # Deadlines are absolute (loop clock), so late wake-ups never add up.
        base = loop.time() - (time.monotonic() - t0)

        async def at(offset: float) -> None:
            if speed > 0:
                delay = base + offset / speed - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)

        bodiless = method == b"HEAD" or playback.status in (204, 304) or playback.status < 200
        if playback.stream and playback.source is None and not bodiless:
            # Its timers keep the head's deadline too: framed now, written when due.
            return await self._play_stream(out, playback, base, speed)
        await at(playback.ttfb)
        if bodiless:
            out.send((playback.head_no_body, END))
            await out.drain()
            return True
        if not playback.stream:
            await at(playback.pieces[0].at)
            if not playback.complete:  # the body never fully arrived when recording
                out.send((playback.head,))
                out.abort()
                return False
            out.send((playback.head, playback.pieces[0], END))
            await out.drain()
            return True
        return await self._play_pages(out, playback, base, speed)

    async def _play_pages(
        self, out: ResponseWriter[F], playback: Playback, base: float, speed: float
    ) -> bool:
        """A long recording, read a page at a time (the next while this one plays) and
        written piece by piece at its deadline: two pages held, however long the stream; a
        client that reads slowly holds the reading back (drain)."""
        assert playback.source is not None
        loop = asyncio.get_running_loop()
        out.send((playback.head,))  # play() waited for its offset
        after = -1
        try:
            while True:
                rows = await loop.run_in_executor(None, self._page, playback.source, after)
                for piece in timed_pieces(rows):
                    framed = out.frame((piece,))  # before its deadline, not at it
                    if speed > 0 and (delay := base + piece.at / speed - loop.time()) > 0:
                        await asyncio.sleep(delay)
                    if out.is_closing():
                        return False  # the client left: stop writing to it
                    out.write(framed)
                await out.drain()
                if len(rows) < PLAY_PAGE:
                    break
                after = rows[-1][0]
        except ConnectionError:
            return False
        except Exception:
            log.exception("ssetape replay: cannot read a recording while playing it")
            out.abort()
            return False
        if not playback.complete:
            out.abort()  # the recording ended here: end the replay the same way
            return False
        out.send((END,))
        return True

    async def _play_stream(
        self, out: ResponseWriter[F], playback: Playback, base: float, speed: float
    ) -> bool:
        """Every write is a timer callback at its absolute deadline: no coroutine per event,
        nothing that can drift; writes due at the same moment go out as one, all framed
        before the first (the head) is due. Each write schedules the next: a burst of new
        streams costs the loop one timer each, not one per event (200 streams of 50 events
        put 10,000 timers in its heap at once)."""
        loop = asyncio.get_running_loop()
        due: list[tuple[float, list[Part]]] = []
        if speed > 0:
            due.append((base + playback.ttfb / speed, [playback.head]))
            for piece in playback.pieces:
                when = base + piece.at / speed
                if when <= due[-1][0]:  # equal deadlines go out in order, as one write
                    due[-1][1].append(piece)
                else:
                    due.append((when, [piece]))
        else:  # everything at once: one write
            due.append((0.0, [playback.head, *playback.pieces]))
        if playback.complete:
            due[-1][1].append(END)
        plan = [(when, out.frame(parts)) for when, parts in due]
        done: asyncio.Future[bool] = loop.create_future()
        handle: asyncio.TimerHandle | None = None

        def emit(i: int) -> None:
            nonlocal handle
            if out.is_closing():  # the client left: stop writing to it
                if not done.done():
                    done.set_result(False)
                return
            out.write(plan[i][1])
            if i < len(plan) - 1:
                handle = loop.call_at(plan[i + 1][0], emit, i + 1)
                return
            if not playback.complete:
                out.abort()  # the recording ended here: end the replay the same way
            done.set_result(playback.complete)

        if speed > 0:
            handle = loop.call_at(plan[0][0], emit, 0)
        else:
            emit(0)
        try:
            return await done
        finally:
            if handle is not None:
                handle.cancel()
