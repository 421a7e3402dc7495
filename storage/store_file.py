"""Whether an SQLite store is still the file at its path, and a new one when it is not.

A store file can be deleted, replaced or moved while a recorder writes to it: SQLite keeps
writing into the open inode, which nobody will ever read, and reports no error. The writer
asks :meth:`StoreFile.vanished` around each commit (a ``stat``, about a microsecond) and, when
the path no longer names the file it opened, starts a fresh file there (with the schema) and
counts what went with the old one.
"""

from __future__ import annotations

import os
from pathlib import Path

from ssetape.storage.engine import check_writable
from ssetape.storage.store import Store

__all__ = ["StoreFile"]


class StoreFile:
    def __init__(self, store: Store) -> None:
        assert store.path is not None
        self.store = store
        self.path: Path = store.path
        self._identity = self._stat()

    def _stat(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_dev, st.st_ino

    def vanished(self) -> str | None:
        """Why the path no longer names the file being written, or None."""
        now = self._stat()
        if now == self._identity:
            return None
        if self._identity is None:
            # It did not exist when opened (SQLite creates it on first write): adopt it.
            self._identity = now
            return None
        return "was deleted" if now is None else "was replaced by another file"

    def check_writable(self) -> None:
        """Raise StoreUnwritable if the file cannot be written now (see engine.check_writable)."""
        check_writable(self.path)

    def recreate(self) -> None:
        """A fresh store file at the path, with the schema (raises what opening raises)."""
        # Connections to the old file must go: new ones open the path anew.
        self.store.engine.dispose()
        fresh = Store.open(str(self.path), create=True)
        fresh.close()
        self._identity = self._stat()

    def refresh(self) -> None:
        """Drop connections that may hold the file in a state it left (read-only, a lost
        disk): the next write opens it again."""
        self.store.engine.dispose()
