"""What the web viewer's pages read of exchanges: the columns a page shows, never a whole row.

A row of ``exchanges`` may hold bodies of many megabytes (a request body up to 16 MiB, a
response body up to ``ssetape_max_response_body``, and any size in a store imported or
written by an older recorder). The list and its live feed read :class:`ListRow`, the
columns a row of the list shows; an exchange's page reads the exchange without its bodies
(reading one raises, rather than loading it), and its bodies cut in SQL (``substr``, on
SQLite's BLOB and PostgreSQL's bytea alike) with their sizes (``length``, which neither
backend reads the body for).
"""

from __future__ import annotations

import datetime as dt
from typing import Any, NamedTuple, TypeVar

from sqlalchemy import ColumnElement, Select, and_, bindparam, func, or_, select
from sqlalchemy.orm import defer

from ssetape.storage.filters import ExchangeFilter
from ssetape.storage.models import Exchange
from ssetape.storage.narrowing import Narrowing
from ssetape.storage.store import Store

__all__ = ["BodyHead", "ListRow", "PageReads", "exchange_key", "keyset_page"]

S = TypeVar("S", bound="Select[*tuple[Any, ...]]")
_NO_FILTER = ExchangeFilter()


class ListRow(NamedTuple):
    """One exchange as a row of the list (and of its live feed) shows it."""

    id: int
    started_at: dt.datetime
    method: str
    scheme: str
    host: str
    port: int
    path: str
    model: str | None
    api: str | None
    state: str
    outcome: str | None
    status: int | None
    ttfb_us: int | None
    ttft_us: int | None
    duration_us: int | None
    gap_max_us: int | None
    event_count: int
    input_tokens: int | None
    output_tokens: int | None
    cost_nusd: int | None
    price_note: str | None
    price_data: str | None
    session: str | None


_LIST_COLUMNS = tuple(getattr(Exchange, name) for name in ListRow._fields)
# A live list's two reads each second, made once: a statement built anew each time is matched
# to its cached form column by column, which costs more than the read itself.
_AFTER = (
    select(*_LIST_COLUMNS)
    .where(Exchange.id > bindparam("after"))
    .order_by(Exchange.id)
    .limit(bindparam("limit"))
)
_BY_ID = (
    select(*_LIST_COLUMNS)
    .where(Exchange.id.in_(bindparam("ids", expanding=True)))
    .order_by(Exchange.id)
)


class BodyHead(NamedTuple):
    """A stored body's first bytes (all of it when it is no longer) and its stored size."""

    head: bytes
    size: int


def keyset_page(
    stmt: S, narrowing: Narrowing, filters: ExchangeFilter | None, *, limit: int | None,
    before: int | None, newest_first: bool = True,
) -> S:  # fmt: skip
    """``stmt`` (a select of exchanges, or of some of their columns) as a keyset page of the
    exchanges ``filters`` match, by start time, newest first unless told otherwise.

    ``before`` (newest first only) is the id of the last exchange of the previous page: this
    page starts right after it. Its keyset, (started_at, id), is read in the query itself, so
    the page is one range scan of the started_at index (which holds the id too: SQLite's
    rowid, PostgreSQL's sort on the few rows sharing a time)."""
    if newest_first:
        stmt = stmt.order_by(Exchange.started_at.desc(), Exchange.id.desc())
    else:
        stmt = stmt.order_by(Exchange.started_at.asc(), Exchange.id.asc())
    if filters is not None:
        stmt = narrowing.apply(stmt, filters, paged=limit is not None)
    if before is not None:
        at = select(Exchange.started_at).where(Exchange.id == before).scalar_subquery()
        # Written as a range on started_at first, so that both backends use the index.
        stmt = stmt.where(
            Exchange.started_at <= at,
            or_(Exchange.started_at < at, and_(Exchange.started_at == at, Exchange.id < before)),
        )
    return stmt if limit is None else stmt.limit(limit)


class PageReads:
    """The viewer's reads of exchanges; nothing here writes."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.narrowing = Narrowing(store)

    def list_rows_after(
        self, after_id: int, filters: ExchangeFilter | None = None, *, limit: int = 100
    ) -> list[ListRow]:
        """The rows of exchanges stored after exchange ``after_id``, oldest first (ids only
        grow): what a live list has not shown yet."""
        stmt = _AFTER if filters is None or filters == _NO_FILTER else filters.apply(_AFTER)
        return self._rows(stmt, after=after_id, limit=limit)

    def list_rows_by_id(self, ids: list[int]) -> list[ListRow]:
        """The rows of these exchanges (those that exist), by id."""
        if not ids:
            return []
        return self._rows(_BY_ID, ids=ids)

    def exchange(self, id_or_uid: int | str, *, request_body: bool = False) -> Exchange | None:
        """One exchange by id or uid (see :func:`exchange_key`), without its bodies: reading
        ``request_body`` or ``response_body`` of it raises (:meth:`bodies` reads them cut).
        ``request_body``: with its request body (which the recorder keeps to 16 MiB: bigger is
        stored as its size and hash), for a page that compares requests."""
        where = exchange_key(id_or_uid)
        if where is None:
            return None
        stmt = select(Exchange).where(where).options(defer(Exchange.response_body, raiseload=True))
        if not request_body:
            stmt = stmt.options(defer(Exchange.request_body, raiseload=True))
        with self.store.Session() as s:
            return s.scalar(stmt)

    def bodies(self, exchange_id: int, limit: int) -> tuple[BodyHead, BodyHead] | None:
        """The request and response bodies of an exchange, each cut at ``limit`` bytes, with
        its stored size (an absent body: empty, size 0)."""
        cols: list[ColumnElement[Any]] = []
        for body in (Exchange.request_body, Exchange.response_body):
            # substr counts from 1, in bytes on a BLOB (SQLite) and on bytea (PostgreSQL).
            cols += [func.substr(body, 1, limit, type_=body.type), func.length(body)]
        with self.store.engine.connect() as conn:
            row = conn.execute(select(*cols).where(Exchange.id == exchange_id)).first()
        if row is None:
            return None
        return BodyHead(row[0] or b"", row[1] or 0), BodyHead(row[2] or b"", row[3] or 0)

    def _rows(self, stmt: Select[Any], **params: Any) -> list[ListRow]:
        with self.store.engine.connect() as conn:  # Core: plain rows, no ORM per-row work
            return [ListRow(*row) for row in conn.execute(stmt, params)]


def exchange_key(id_or_uid: int | str) -> ColumnElement[bool] | None:
    """Which exchange a key names: an id, or a uid (a str of ASCII digits shorter than a uid
    is an id); None for an id no column holds (past 64 bits, 5,000 digits)."""
    key = id_or_uid
    if isinstance(key, str) and len(key) != 32 and key.isascii() and key.isdigit():
        key = int(key) if len(key.lstrip("0")) < 20 else 0  # int() refuses 4,301 digits
    if isinstance(key, str):
        return Exchange.uid == key
    return Exchange.id == key if 0 < key < 2**63 else None
