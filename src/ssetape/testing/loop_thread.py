"""One asyncio event loop in a daemon thread, shared by every in-process replay server.

Tests may be synchronous or run their own event loop; replay servers must keep their timers
running either way, so they live on this loop. One thread per process: starting a server on
it costs a socket, not a thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    _shared: LoopThread | None = None
    _shared_lock = threading.Lock()

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="ssetape-replay-loop", daemon=True)
        self._thread.start()

    @classmethod
    def shared(cls) -> LoopThread:
        with cls._shared_lock:
            if cls._shared is None:
                cls._shared = cls()
            return cls._shared

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        """Run ``coro`` on the loop from another thread and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)
