"""One exchange read cut: its bodies and output text as their first bytes (characters) and
their whole size, never the whole column.

An agent's view of an exchange (`ssetape mcp`'s ``get_exchange``) shows a few thousand
characters of each: a 100 MiB body read whole, to be cut in Python, cost ~300 MB. Here the
database cuts it and says its length: PostgreSQL's ``substr``; on SQLite, whose ``substr``
loads the whole value first, the body's first bytes through incremental blob I/O.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from sqlalchemy import func, null, select
from sqlalchemy.orm import defer

from ssetape.storage.models import Exchange
from ssetape.storage.store import Store

__all__ = ["Cut", "ExchangeHead", "ExchangeHeads"]

_CUT_COLUMNS = (Exchange.request_body, Exchange.response_body, Exchange.output_text)


class Cut(NamedTuple):
    """The first bytes of a body (characters of a text), and the size of the whole."""

    head: bytes | str
    size: int

    @property
    def cut(self) -> bool:
        return len(self.head) < self.size


class ExchangeHead(NamedTuple):
    """An exchange whose ``request_body``, ``response_body`` and ``output_text`` were not
    read (reading them raises): their cuts stand beside it, None where the column is NULL."""

    exchange: Exchange
    request_body: Cut | None
    response_body: Cut | None
    output_text: Cut | None


def _cut(head: Any, size: int | None) -> Cut | None:
    if head is None or size is None:
        return None
    return Cut(head if isinstance(head, str) else bytes(head), int(size))


class ExchangeHeads:
    """Exchanges read cut, each in a session of its own."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def exchange(self, id_or_uid: int | str, limit: int) -> ExchangeHead | None:
        """The exchange with id (an int) or uid (a str) ``id_or_uid``, its bodies cut to
        ``limit`` bytes and its output text to ``limit`` characters; None if there is none
        (or the id is one no column holds)."""
        key = id_or_uid
        if isinstance(key, str) and len(key) != 32 and key.isascii() and key.isdigit():
            key = int(key) if len(key.lstrip("0")) < 20 else 0  # as exchange_key reads it
        if isinstance(key, int) and not 0 < key < 2**63:
            return None
        where = Exchange.id == key if isinstance(key, int) else Exchange.uid == key
        sqlite = self.store.is_sqlite
        cuts = [c for col in _CUT_COLUMNS for c in (_head(col, limit, sqlite), func.length(col))]
        unread = [defer(col, raiseload=True) for col in _CUT_COLUMNS]
        stmt = select(Exchange, *cuts).where(where).options(*unread)
        with self.store.Session() as s:
            row = s.execute(stmt).first()
            if row is None:
                return None
            x, rb, rn, sb, sn, ot, on = row
            if sqlite:  # substr would load the whole blob: read its first bytes only
                db = s.connection().connection.driver_connection
                rb = _blob_head(db, "request_body", x.id, rn, limit)
                sb = _blob_head(db, "response_body", x.id, sn, limit)
        return ExchangeHead(x, _cut(rb, rn), _cut(sb, sn), _cut(ot, on))


def _head(col: Any, limit: int, sqlite: bool) -> Any:
    """What is read of ``col``: its first ``limit`` bytes (characters), or on SQLite, for a
    body, nothing (:func:`_blob_head` reads it)."""
    if sqlite and col is not Exchange.output_text:
        return null()
    return func.substr(col, 1, limit)


def _blob_head(db: Any, column: str, xid: int, size: int | None, limit: int) -> bytes | None:
    """The first ``limit`` bytes of a body on SQLite, read from the row's pages one by one
    (sqlite3's incremental blob I/O), never the whole value."""
    if size is None:
        return None
    with db.blobopen("exchanges", column, xid, readonly=True) as blob:
        return bytes(blob.read(limit))
