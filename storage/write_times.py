"""How long the writer's transactions take: the metrics' store write durations.

Timed by the engine's own events, so the writer is untouched: a transaction starts at its
``begin`` and ends when its connection goes back to the pool (``checkin``, after the commit
and its sync), and only those that stored recorded rows count: the writer's ``on_commit``
(``Ledger.in_commit``), last in each, marks them. The analysis saved after a batch, the run
row's heartbeat and a prune are other transactions, not timed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, Engine, event

__all__ = ["WriteTimes"]

MAX_KEPT = 10_000  # durations waiting to be taken (twice a second), at most


class WriteTimes:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._here = threading.local()  # one transaction at a time per thread
        self._lock = threading.Lock()
        self._seconds: list[float] = []
        event.listen(engine, "begin", self._begin)
        event.listen(engine, "checkin", self._checkin)

    def timing(self, on_commit: Callable[[Connection, int, int], object]) -> Callable[..., None]:
        """``on_commit`` (the writer's), marking the transaction it runs in as timed."""

        def marked(conn: Connection, exchanges: int, events: int) -> None:
            self._here.timed = True
            on_commit(conn, exchanges, events)

        return marked

    def take(self) -> list[float]:
        """The durations (seconds) of the timed transactions since the last call."""
        with self._lock:
            got, self._seconds = self._seconds, []
        return got

    def close(self) -> None:
        event.remove(self._engine, "begin", self._begin)
        event.remove(self._engine, "checkin", self._checkin)

    def _begin(self, conn: Connection) -> None:
        self._here.started, self._here.timed = time.perf_counter(), False

    def _checkin(self, dbapi_connection: Any, record: Any) -> None:
        here = self._here
        if not getattr(here, "timed", False):
            return
        here.timed = False
        took = time.perf_counter() - here.started
        with self._lock:
            if len(self._seconds) < MAX_KEPT:
                self._seconds.append(took)
