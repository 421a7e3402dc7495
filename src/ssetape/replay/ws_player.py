"""The player's side of WebSocket sessions: a recorded session's plan read once (kept in a
cache bounded by count and by bytes, as the player's playbacks are) and played on the
connection of an upgrade request that matched it.

The cache keeps plans (:class:`WsRecording`: a few bytes a frame, the first server frames and
the small client frames' canonical forms), one for each set of ignored fields
(``--ignore-field`` changes how client frames compare), never a session's payloads: those
are read a page at a time as the session plays (:mod:`ssetape.replay.ws_pages`). The replay
server preloads the newest sessions' plans before it listens, so a first client's 101 waits
for no read. An exchange that is not a session (recorded before sessions were, or an HTTP
exchange whose request asked for an upgrade) is left to the HTTP player: :meth:`WsPlayer.play`
answers None.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence

from ssetape.replay.faults import Faults
from ssetape.replay.miss import Miss
from ssetape.replay.ws_faults import SessionFaults
from ssetape.replay.ws_miss import FrameRules
from ssetape.replay.ws_recording import WsRecording
from ssetape.replay.ws_session import WsSession, WsUpgrade, tell
from ssetape.storage.session_frames import SessionFrames
from ssetape.storage.store import Store

__all__ = ["WsPlayer"]

CACHE = 64  # plans kept, at most
CACHE_BYTES = 64 << 20  # bytes they hold, at most

_Key = tuple[int, tuple[str, ...]]  # a session and the fields its client frames drop
_UNKNOWN = object()  # not in the cache


class WsPlayer:
    """``faults``: the replay's (each session takes those that still serve, as a stream
    does); ``on_miss``: hears of each client frame that missed (the front counts it)."""

    def __init__(
        self,
        store: Store,
        *,
        faults: Faults | None = None,
        on_miss: Callable[[Miss], object] = tell,
    ) -> None:
        self.faults = faults
        self.on_miss = on_miss
        self._frames = SessionFrames(store)
        self._cache: OrderedDict[_Key, WsRecording | None] = OrderedDict()  # None: no session
        self._held = 0
        self._lock = threading.Lock()  # loads run in executor threads

    def preload(self, ids: Sequence[int]) -> None:
        """Plan the sessions among ``ids`` (oldest first), newest first, for no ignored
        field, while the cache has room."""
        for xid in reversed(self._frames.sessions_among(ids)[-CACHE:]):
            self.load(xid)
            if self._held > CACHE_BYTES:
                break

    def load(self, exchange_id: int, ignore: tuple[str, ...] = ()) -> WsRecording | None:
        """The session ready to play (None: not a session), from the cache or planned from
        the store a page at a time; off the loop."""
        key = (exchange_id, ignore)
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        head = self._frames.head(exchange_id)
        plan = None
        if head is not None:
            plan = WsRecording.of(head, self._frames.scan(exchange_id), ignore)
        with self._lock:
            if key not in self._cache:
                self._cache[key] = plan
                self._held += plan.size if plan is not None else 0
                while len(self._cache) > 1 and (
                    len(self._cache) > CACHE or self._held > CACHE_BYTES
                ):
                    gone = self._cache.popitem(last=False)[1]
                    self._held -= gone.size if gone is not None else 0
        return plan

    async def play(
        self,
        upgrade: WsUpgrade,
        exchange_id: int,
        t0: float,
        speed: float,
        rules: FrameRules,
    ) -> bool | None:
        """Play session ``exchange_id`` on ``upgrade``'s connection until it ends (False:
        the connection is done); None if the exchange is not a session."""
        # One plain dict read (atomic, no thread hop): a load in a thread may evict it.
        found = self._cache.get((exchange_id, rules.ignore), _UNKNOWN)
        if found is None:
            return None
        if isinstance(found, WsRecording):
            recording: WsRecording | None = found
        else:
            loop = asyncio.get_running_loop()
            recording = await loop.run_in_executor(None, self.load, exchange_id, rules.ignore)
        if recording is None:
            return None
        faults = SessionFaults.of(self.faults.for_stream()) if self.faults else None
        await WsSession(recording, upgrade, self._frames, t0=t0, speed=speed, rules=rules,
                        faults=faults, on_miss=self.on_miss).run()  # fmt: skip
        return False
