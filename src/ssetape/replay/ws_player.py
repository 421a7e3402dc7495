"""The player's side of WebSocket sessions: a recorded session read once (kept in a cache
bounded by count and by bytes, as the player's playbacks are) and played on the connection of
an upgrade request that matched it.

The cache keeps a session's stored rows and the plans built from them for each set of
ignored fields (``--ignore-field`` changes how client frames compare): the replay server
preloads the newest sessions before it listens, so a first client's 101 waits for no read.
An exchange that is not a session (recorded before sessions were, or an HTTP exchange whose
request asked for an upgrade) is left to the HTTP player: :meth:`WsPlayer.play` answers None.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ssetape.replay.faults import Faults
from ssetape.replay.miss import Miss
from ssetape.replay.ws_faults import SessionFaults
from ssetape.replay.ws_miss import FrameRules
from ssetape.replay.ws_recording import WsRecording
from ssetape.replay.ws_session import WsSession, WsUpgrade, tell
from ssetape.storage.session_frames import FrameRow, SessionFrames, SessionHead
from ssetape.storage.store import Store

__all__ = ["WsPlayer"]

CACHE = 64  # sessions kept loaded, at most
CACHE_BYTES = 64 << 20  # bytes they hold, at most
BUILD_ON_LOOP = 2000  # frames of a session whose plan is built on the loop, at most


@dataclass(slots=True)
class _Loaded:
    head: SessionHead
    rows: list[FrameRow]
    size: int
    plans: dict[tuple[str, ...], WsRecording] = field(default_factory=dict)

    def plan(self, ignore: tuple[str, ...]) -> WsRecording:
        found = self.plans.get(ignore)
        if found is None:
            found = self.plans[ignore] = WsRecording.of(self.head, self.rows, ignore)
        return found


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
        self._cache: OrderedDict[int, _Loaded | None] = OrderedDict()  # None: not a session
        self._held = 0
        self._lock = threading.Lock()  # loads run in executor threads

    def preload(self, ids: Sequence[int]) -> None:
        """Read the sessions among ``ids`` (oldest first), newest first, while the cache has
        room; their plans for no ignored field are built too."""
        for xid in reversed(self._frames.sessions_among(ids)[-CACHE:]):
            loaded = self._load(xid)
            if loaded is not None:
                loaded.plan(())
            if self._held > CACHE_BYTES:
                break

    def _load(self, exchange_id: int) -> _Loaded | None:
        """The session's rows, from the cache or the store (off the loop)."""
        with self._lock:
            if exchange_id in self._cache:
                self._cache.move_to_end(exchange_id)
                return self._cache[exchange_id]
        found = self._frames.session(exchange_id)
        loaded = None
        if found is not None:
            head, rows = found
            loaded = _Loaded(head, rows, 3 * sum(len(r.raw) for r in rows))  # rows, frames
        with self._lock:
            if exchange_id not in self._cache:
                self._cache[exchange_id] = loaded
                self._held += loaded.size if loaded is not None else 0
                while len(self._cache) > 1 and (
                    len(self._cache) > CACHE or self._held > CACHE_BYTES
                ):
                    gone = self._cache.popitem(last=False)[1]
                    self._held -= gone.size if gone is not None else 0
        return loaded

    def load(self, exchange_id: int, ignore: tuple[str, ...] = ()) -> WsRecording | None:
        """The session ready to play (None: not a session); off the loop."""
        loaded = self._load(exchange_id)
        return loaded.plan(ignore) if loaded is not None else None

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
        recording: WsRecording | None = None
        # One plain dict read (atomic, no thread hop): a load in a thread may evict it.
        loaded = self._cache.get(exchange_id, _UNKNOWN)
        if loaded is None:
            return None
        if isinstance(loaded, _Loaded) and (
            rules.ignore in loaded.plans or len(loaded.rows) <= BUILD_ON_LOOP
        ):
            recording = loaded.plan(rules.ignore)
        if recording is None:
            loop = asyncio.get_running_loop()
            recording = await loop.run_in_executor(None, self.load, exchange_id, rules.ignore)
        if recording is None:
            return None
        faults = SessionFaults.of(self.faults.for_stream()) if self.faults else None
        await WsSession(recording, upgrade, t0=t0, speed=speed, rules=rules, faults=faults,
                        on_miss=self.on_miss).run()  # fmt: skip
        return False
