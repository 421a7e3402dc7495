"""Exchanges in keyset pages by a timing, slowest (or fastest) first: `ssetape list --sort`,
the MCP server's ``order_by``, the web viewer's list (``sort=``, by its columns' headers).

A sort is a key of :data:`SORT_KEYS` (``-`` before it: descending); ``-started``, newest
first, is every list's default. A page is ordered by (value, id), both the same way, and
exchanges without the value (no TTFT: not a stream, or still recording) come after all
those with one, whichever way: the slowest first are the slowest known, not the unknown.
So a page is read in two ranges, each a range scan of its (value, id) index (migration
0014): those with a value, from the cursor on; then, when that leaves the page short, those
without, by id. The cursor carries the last row's value and id, so a page starts right
after the row the previous one ended with, even when that row's value changed since (an
exchange that finished in between).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, Select, and_, or_, select
from sqlalchemy.orm import InstrumentedAttribute

from ssetape.storage.filters import RANGES, ExchangeFilter
from ssetape.storage.models import Exchange
from ssetape.storage.narrowing import Narrowing
from ssetape.storage.page_reads import ListRow, keyset_page
from ssetape.storage.store import Store

__all__ = ["NEWEST", "SORTS", "SORT_KEYS", "Sort", "SortedPages"]

SORT_KEYS: dict[str, InstrumentedAttribute[Any]] = {"started": Exchange.started_at, **RANGES}
# Every sort a reader may name, as it names them: the MCP tool's enum.
SORTS = tuple(f"{sign}{key}" for key in SORT_KEYS for sign in ("-", ""))
NEWEST = "-started"
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_NULL = "null"
T = TypeVar("T")
# The web viewer's list: the columns of its rows, never a body (a row's may be megabytes).
_LIST_ROWS = select(*(getattr(Exchange, name) for name in ListRow._fields))


@dataclasses.dataclass(frozen=True, slots=True)
class After:
    """Where a page starts: right after the row with this value (None: it had none) and id."""

    value: int | None
    id: int


@dataclasses.dataclass(frozen=True, slots=True)
class Sort:
    """The order of a list: a key of :data:`SORT_KEYS`, descending or not."""

    key: str = "started"
    descending: bool = True

    @classmethod
    def parse(cls, text: str | None, *, option: str = "--sort") -> Sort:
        """``-duration``, ``ttft``, ...; a ValueError naming every sort for another."""
        name = (text or NEWEST).strip()
        if name not in SORTS:
            raise ValueError(
                f"{option} {name[:40]!r}: use one of {', '.join(SORT_KEYS)} "
                "(- before it: descending, e.g. -duration, slowest first)"
            )
        return cls(name.lstrip("-"), name.startswith("-"))

    def __str__(self) -> str:
        return f"{'-' if self.descending else ''}{self.key}"

    @property
    def newest_first(self) -> bool:
        """The default order, which pages by id alone (as lists always have)."""
        return str(self) == NEWEST

    def cursor(self, x: Exchange | ListRow) -> str:
        """Where the page after ``x`` starts, as text for a reader to hand back."""
        if self.newest_first:
            return str(x.id)
        value = getattr(x, SORT_KEYS[self.key].key)
        if isinstance(value, dt.datetime):
            value = _micros(value)
        return f"{self}:{_NULL if value is None else value}:{x.id}"

    def after(self, cursor: str) -> After:
        """The row a ``cursor`` this sort gave names; a ValueError for any other text."""
        text = cursor.strip()
        try:
            if self.newest_first:
                return After(None, _int(text, 1))
            name, value, xid = text.split(":")
            if name != str(self):
                raise ValueError
            return After(None if value == _NULL else _int(value, -(2**63)), _int(xid, 1))
        except OverflowError:
            raise ValueError(
                f"cursor {cursor[:40]!r}: a number past what the store holds (at most 2**63 - 1)"
            ) from None
        except ValueError:
            raise ValueError(
                f"cursor {cursor[:40]!r}: not one a page sorted by {self} ended with "
                "(pass the next cursor a page gave)"
            ) from None


class SortedPages:
    """Keyset pages of exchanges in any :class:`Sort` (see the module's text)."""

    def __init__(self, store: Store, narrowing: Narrowing | None = None) -> None:
        self.store = store
        self.narrowing = narrowing or Narrowing(store)

    def exchanges(
        self, filters: ExchangeFilter | None, sort: Sort, *, limit: int | None,
        cursor: str | None = None,
    ) -> list[Exchange]:  # fmt: skip
        """A page of the exchanges ``filters`` match in ``sort``'s order, from ``cursor`` (as
        :meth:`Sort.cursor` gave it for the last row of the previous page) on."""
        return self.rows(select(Exchange), self._read, filters, sort, limit=limit, cursor=cursor)

    def list_rows(
        self, filters: ExchangeFilter | None, sort: Sort, *, limit: int, cursor: str | None = None
    ) -> list[ListRow]:
        """:meth:`exchanges` as the web viewer's list shows them: their columns, no body."""
        return self.rows(_LIST_ROWS, self._list_read, filters, sort, limit=limit, cursor=cursor)

    def rows(
        self, stmt: Select[Any], read: Callable[[Select[Any]], list[T]],
        filters: ExchangeFilter | None, sort: Sort, *, limit: int | None,
        cursor: str | None = None,
    ) -> list[T]:  # fmt: skip
        """:meth:`exchanges` as ``stmt`` selects them (the web's list: its columns, no body;
        with the sort's column, for :meth:`Sort.cursor`), each range read by ``read``."""
        after = sort.after(cursor) if cursor else None
        if sort.newest_first:
            before = after.id if after else None
            return read(keyset_page(stmt, self.narrowing, filters, limit=limit, before=before))
        column = SORT_KEYS[sort.key]
        rows: list[T] = []
        if after is None or after.value is not None:
            where: list[ColumnElement[bool]] = [column.is_not(None)]
            if after is not None:
                where += _beyond(column, _bound(sort, after), after.id, sort.descending)
            rows = read(self._page(stmt, where, (column, Exchange.id), sort, filters, limit))
        if column.nullable and (limit is None or len(rows) < limit):
            nulls: list[ColumnElement[bool]] = [column.is_(None)]
            if after is not None and after.value is None:
                nulls.append(Exchange.id < after.id if sort.descending else Exchange.id > after.id)
            left = None if limit is None else limit - len(rows)
            rows += read(self._page(stmt, nulls, (Exchange.id,), sort, filters, left))
        return rows

    def _page(
        self, stmt: Select[Any], where: list[ColumnElement[bool]], order: tuple[Any, ...],
        sort: Sort, filters: ExchangeFilter | None, limit: int | None,
    ) -> Select[Any]:  # fmt: skip
        # No NULLS FIRST/LAST: the NULLs are in a range of their own, and each backend's
        # default is the way its index runs.
        stmt = stmt.where(*where)
        stmt = stmt.order_by(*(c.desc() if sort.descending else c.asc() for c in order))
        if filters is not None:
            stmt = self.narrowing.apply(stmt, filters, paged=limit is not None)
        return stmt if limit is None else stmt.limit(limit)

    def _read(self, stmt: Select[Any]) -> list[Exchange]:
        with self.store.Session() as s:
            return list(s.scalars(stmt))

    def _list_read(self, stmt: Select[Any]) -> list[ListRow]:
        with self.store.engine.connect() as conn:  # Core, as PageReads reads the list
            return [ListRow(*row) for row in conn.execute(stmt)]


def _int(text: str, low: int) -> int:
    """An int a 64-bit column holds (PostgreSQL refuses the query for any other)."""
    digits = text.removeprefix("-")
    if not (digits.isascii() and digits.isdigit()):
        raise ValueError(text)
    # int() refuses 4,301 digits: past 20, no column holds it anyway.
    value = int(text) if len(digits) <= 20 else 2**63
    if not low <= value < 2**63:
        raise OverflowError(text)
    return value


def _micros(when: dt.datetime) -> int:
    when = when if when.tzinfo else when.replace(tzinfo=dt.UTC)
    return (when - _EPOCH) // dt.timedelta(microseconds=1)


def _bound(sort: Sort, after: After) -> Any:
    """The cursor's value as the sort's column holds it."""
    assert after.value is not None
    if sort.key == "started":
        return _EPOCH + dt.timedelta(microseconds=after.value)
    return after.value


def _beyond(column: Any, value: Any, xid: int, descending: bool) -> list[ColumnElement[bool]]:
    """(column, id) past (value, xid) in the sort's direction, written as a range on the
    column first so that both backends read it off the index."""
    if descending:
        return [column <= value, or_(column < value, and_(column == value, Exchange.id < xid))]
    return [column >= value, or_(column > value, and_(column == value, Exchange.id > xid))]
