"""The store's side of cassettes and HAR: which exchanges an export picks, their rows in
batches, their events and chunks in bounded pages, and the inserts of an import.

Everything here is bounded: an export holds a batch of exchanges and, of their events, either
all of those that fit a budget together or one page of one long stream at a time, so a
million-event exchange costs a page of memory, not a million rows (issue 37). The format of
the lines is ``ssetape.cassettes``' business; no SQL is written anywhere else for them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple, cast

from sqlalchemy import (
    Column,
    Connection,
    Select,
    Table,
    TypeDecorator,
    func,
    insert,
    select,
    update,
)

from ssetape.storage.models import Chunk, Event, Exchange
from ssetape.storage.store import Store

__all__ = ["KINDS", "TABLES", "CassetteRows", "ColumnSpec", "Inserts", "Narrow", "columns"]

# The tables a cassette line carries, by the kind its line names.
TABLES: dict[str, Table] = {
    "exchange": cast(Table, Exchange.__table__),
    "event": cast(Table, Event.__table__),
    "chunk": cast(Table, Chunk.__table__),
}
KINDS = tuple(TABLES)
_EXCHANGES = TABLES["exchange"]
Narrow = Callable[[Select[Any]], Select[Any]]  # adds WHERE clauses to a select of exchanges
Rows = list[dict[str, Any]]
# The orders an export writes in: a cassette by request (so a re-recording diffs line by
# line), a HAR by time.
ORDERS = {
    "request": (_EXCHANGES.c.fingerprint, _EXCHANGES.c.started_at, _EXCHANGES.c.id),
    "time": (_EXCHANGES.c.started_at, _EXCHANGES.c.id),
}


class ColumnSpec(NamedTuple):
    """One column of a table a cassette carries, as a line's codec needs to know it."""

    name: str
    python_type: type  # what it holds (``object``: JSON, or a type with none declared)
    nullable: bool
    required: bool  # NOT NULL and no default: a line must have it


def columns(kind: str) -> list[ColumnSpec]:
    """The columns of the table a cassette line of ``kind`` carries, from the models: a
    column added to the store travels with no change to the cassette code."""
    return [_spec(c) for c in TABLES[kind].columns]


def _spec(col: Column[Any]) -> ColumnSpec:
    typ: Any = col.type
    if isinstance(typ, TypeDecorator):  # e.g. UTCDateTime: what it stores is its impl's type
        typ = typ.impl_instance
    try:
        py: type = typ.python_type
    except NotImplementedError:
        py = object
    has_default = col.default is not None or col.server_default is not None
    return ColumnSpec(col.name, py, bool(col.nullable), not col.nullable and not has_default)


class CassetteRows:
    """Bounded reads of what an export writes."""

    def __init__(self, store: Store, *, page: int = 1000, together: int = 50_000) -> None:
        """``page``: rows of one long stream read at a time; ``together``: the events (or
        chunks) of a batch's short streams read in one query, at most."""
        self.store = store
        self.page = page
        self.together = together

    def ids(self, narrow: Narrow | None, order: str) -> list[int]:
        """The ids of the exchanges picked, in the export's order (ids only: a million of
        them are a few MB)."""
        stmt = select(_EXCHANGES.c.id)
        stmt = (narrow(stmt) if narrow is not None else stmt).order_by(*ORDERS[order])
        with self.store.engine.connect() as conn:
            return list(conn.execute(stmt).scalars())

    def exchanges(self, ids: list[int]) -> dict[int, dict[str, Any]]:
        """Each exchange's columns (a batch of them); one deleted meanwhile is absent."""
        with self.store.engine.connect() as conn:
            found = conn.execute(select(_EXCHANGES).where(_EXCHANGES.c.id.in_(ids)))
            return {r.id: dict(r._mapping) for r in found}

    def children(
        self, kind: str, ids: list[int]
    ) -> Iterator[tuple[int, list[dict[str, Any]] | None]]:
        """For each of ``ids`` in order, its events or chunks (``kind``) in seq order when
        the short streams of the batch fit the budget together; None for a long one, which
        :meth:`pages` reads a page at a time."""
        table = TABLES[kind]
        with self.store.engine.connect() as conn:
            counts: dict[int, int] = dict(
                conn.execute(
                    select(table.c.exchange_id, func.count())
                    .where(table.c.exchange_id.in_(ids))
                    .group_by(table.c.exchange_id)
                ).all()
            )
        budget, together = self.together, []
        for xid in ids:
            n = counts.get(xid, 0)
            if 0 < n <= budget:
                budget -= n
                together.append(xid)
        rows: dict[int, list[dict[str, Any]]] = {}
        if together:
            q = select(table).where(table.c.exchange_id.in_(together))
            with self.store.engine.connect() as conn:
                for r in conn.execute(q.order_by(table.c.exchange_id, table.c.seq)):
                    rows.setdefault(r.exchange_id, []).append(dict(r._mapping))
        for xid in ids:
            yield xid, rows.pop(xid, None) if counts.get(xid) else []

    def pages(self, kind: str, xid: int) -> Iterator[dict[str, Any]]:
        """One exchange's events or chunks, a page at a time (keyset on seq)."""
        table = TABLES[kind]
        after = -1
        while True:
            q = (
                select(table)
                .where(table.c.exchange_id == xid, table.c.seq > after)
                .order_by(table.c.seq)
                .limit(self.page)
            )
            with self.store.engine.connect() as conn:
                page = [dict(r._mapping) for r in conn.execute(q)]
            yield from page
            if len(page) < self.page:
                return
            after = page[-1]["seq"]

    @contextmanager
    def importing(self) -> Iterator[Inserts]:
        """One transaction for an import: all of it, or nothing."""
        with self.store.engine.begin() as conn:
            yield Inserts(conn)


class Inserts:
    """The writes of an import, inside its transaction."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def exchange(self, values: dict[str, Any]) -> int | None:
        """Insert one exchange; its id, or None when the store has its uid already."""
        conn = self._conn
        if conn.execute(select(_EXCHANGES.c.id).where(_EXCHANGES.c.uid == values["uid"])).first():
            return None
        xid: int = conn.execute(insert(_EXCHANGES).returning(_EXCHANGES.c.id), values).scalar_one()
        return xid

    def rows(self, kind: str, rows: list[dict[str, Any]], xid: int) -> None:
        """A batch of exchange ``xid``'s events or chunks (``kind``)."""
        if rows:
            table = TABLES[kind]
            self._conn.execute(insert(table), _uniform(table, rows, xid))

    def event_count(self, xid: int, count: int) -> None:
        """Cassettes from version 2 leave the count out: it is what the import inserted."""
        stmt = update(_EXCHANGES).where(_EXCHANGES.c.id == xid).values(event_count=count)
        self._conn.execute(stmt)


def _uniform(table: Table, rows: list[dict[str, Any]], xid: int) -> list[dict[str, Any]]:
    """Rows with the same keys: an executemany takes its columns from the first row only, so
    a key the first row lacks (an empty optional field) would be dropped from every row."""
    keys = set().union(*rows)
    defaults = {
        k: getattr(c.default, "arg", None)
        if c.default is not None and c.default.is_scalar
        else None
        for k, c in table.c.items()
        if k in keys
    }
    return [{**defaults, **r, "exchange_id": xid} for r in rows]
