"""Whether an SQLite store is still the file at its path, and a new one when it is not.

A store file can be deleted, replaced or moved while a recorder writes to it: SQLite keeps
writing into the open inode, which nobody will ever read, and reports no error. The writer
asks :meth:`StoreFile.vanished` around each commit (a ``stat``, about a microsecond) and, when
the path no longer names the file it opened, starts a fresh file there (with the schema) and
counts what went with the old one. A path it cannot look at (a directory made unreadable, a
disk that errs) is not a deleted file: that is an outage like a locked database, retried with
backoff, and so is a new file that cannot be made yet.
"""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from ssetape.storage.batch import BEGIN, Batch, BatchSql, Op
from ssetape.storage.engine import StoreUnwritable, check_writable, one_line
from ssetape.storage.ledger import Ledger
from ssetape.storage.store import Store

__all__ = ["LOST_WITH_FILE", "StoreFile"]

log = logging.getLogger("ssetape.storage")

LOST_WITH_FILE = "events recorded before the store file was deleted or replaced went with it"

# What stat() says of a path that names no file: deleted, or a folder on its way replaced.
_GONE = frozenset((errno.ENOENT, errno.ENOTDIR))


class StoreFile:
    def __init__(self, store: Store) -> None:
        assert store.path is not None
        self.store = store
        self.path: Path = store.path
        try:
            self._identity = self._stat()
        except StoreUnwritable:
            self._identity = None  # as if not there yet: what is there later is adopted
        # Why the file it opened is gone, until a new one is made and begun (see follow).
        self.gone: str | None = None

    def _stat(self) -> tuple[int, int] | None:
        """Which file the path names; None if none (raises StoreUnwritable if it cannot tell)."""
        try:
            st = os.stat(self.path)
        except OSError as e:
            if e.errno in _GONE:
                return None
            raise StoreUnwritable(f"cannot tell whether {self.path} is still there: {e}") from e
        return st.st_dev, st.st_ino

    def vanished(self) -> str | None:
        """Why the path no longer names the file being written, said once (then ``gone``
        says it until :meth:`recreate`), or None. Raises StoreUnwritable if it cannot tell."""
        if self.gone is not None:
            return None
        now = self._stat()
        if now == self._identity:
            return None
        if self._identity is None:
            # It did not exist when opened (SQLite creates it on first write): adopt it.
            self._identity = now
            return None
        self.gone = "was deleted" if now is None else "was replaced by another file"
        return self.gone

    def follow(
        self,
        ledger: Ledger,
        ids: dict[str, int],
        fields: dict[str, dict[str, Any]],
        engine: Engine,
        sql: BatchSql,
    ) -> None:
        """Before a write (the writer's thread): if the file is gone, count what went with
        it at once (``ids``, of the old file, are forgotten), then start a fresh one at the
        path and begin the open exchanges (``fields``) again in it. Raises StoreUnwritable
        while it cannot tell, or the new file cannot be made: the writer retries."""
        why = self.vanished()
        if why is not None:
            ids.clear()
            events, exchanges = ledger.file_lost()
            log.error(
                f"ssetape storage: {self.path} {why} while recording; {events} events and "
                f"{max(0, exchanges - len(fields))} exchanges went with it; recording goes "
                f"on into a new {self.path}"
            )
        if self.gone is not None:
            self.recreate()
            ops: list[Op] = [
                (BEGIN, uid, {**f, "gap_seq": 0, "error": LOST_WITH_FILE})
                for uid, f in fields.items()
            ]
            batch = Batch(ops, {})
            if ops:
                batch.apply(engine, sql)
            ids.update(batch.ids)
            for uid in batch.ids:  # their finish must say it, and replay must stop at the start
                ledger.lost_before(uid, LOST_WITH_FILE)
            ledger.reopened(batch.new)
            self.gone = None  # only now: a failure above makes the next attempt do it all
        self.check_writable()

    def check_writable(self) -> None:
        """Raise StoreUnwritable if the file cannot be written now (see engine.check_writable)."""
        check_writable(self.path)

    def recreate(self) -> None:
        """A fresh store file at the path, with the schema (raises what opening raises)."""
        # Connections to the old file must go: new ones open the path anew.
        self.store.engine.dispose()
        try:
            fresh = Store.open(str(self.path), create=True)
        except Exception as e:  # a directory made read-only, a full disk: retried
            raise StoreUnwritable(f"cannot make a new {self.path}: {one_line(e)}") from e
        fresh.close()
        self._identity = self._stat()

    def refresh(self) -> None:
        """Drop connections that may hold the file in a state it left (read-only, a lost
        disk): the next write opens it again."""
        self.store.engine.dispose()
