"""A store the viewer waits for: an SQLite file no recorder has created yet.

`ssetape web` may start first and `ssetape record` later. The viewer never creates or
migrates the store then: that is the recorder's to do, and two processes creating one file
race. It looks for the file every :data:`RETRY_S` seconds (when a page or a live list asks)
and opens it read-only once it holds a schema at this ssetape's head, so a store a recorder
is still migrating is simply not there yet.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from ssetape.storage.engine import SQLITE_MAGIC
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store, StoreError

__all__ = ["RETRY_S", "WaitingStore"]

RETRY_S = 0.5


class WaitingStore:
    """The reads of the SQLite store at ``path`` once a recorder has made it, None until."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()  # pages are rendered on several threads at once
        self._queries: Queries | None = None
        self._next = 0.0
        # Why a file that is there cannot be read yet (a schema from a newer ssetape, say).
        self.problem: str | None = None

    def queries(self) -> Queries | None:
        with self._lock:
            if self._queries is None and time.monotonic() >= self._next:
                self._next = time.monotonic() + RETRY_S
                self._queries = self._open()
            return self._queries

    def _open(self) -> Queries | None:
        # Only a file SQLite has written a header to: opening an empty one would set its
        # journal mode, which is the creating recorder's to do.
        try:
            with self.path.open("rb") as f:
                if f.read(len(SQLITE_MAGIC)) != SQLITE_MAGIC:
                    return None
        except OSError:
            return None
        try:
            return Queries(Store.open_read_only(str(self.path)))
        except StoreError as e:  # no schema yet, or not at head yet: still being made
            self.problem = str(e)
            return None

    def close(self) -> None:
        with self._lock:
            if self._queries is not None:
                self._queries.store.close()
