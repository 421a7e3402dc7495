"""The store's side of stream knowledge: the rows an analysis reads (an exchange and its
events, as the recorder stored them) and the writes that save it (the knowledge columns, the
price, the findings), each inside one transaction the analysis holds.

``ssetape.analysis.knowledge`` decides what to analyse and how; it holds no SQL (issue 37).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, NamedTuple, cast

from sqlalchemy import BindParameter, Connection, Table, bindparam, delete, insert, select, update
from sqlalchemy.orm import InstrumentedAttribute, Session

from ssetape.storage.models import Event, Exchange, Finding
from ssetape.storage.store import Store

__all__ = ["KnowledgeRows", "KnowledgeTx", "Place"]

EXCHANGES = cast(Table, Exchange.__table__)
_UPDATE = update(EXCHANGES).where(EXCHANGES.c.id == bindparam("xid_"))
_PLACE = (EXCHANGES.c.id, EXCHANGES.c.scheme, EXCHANGES.c.host, EXCHANGES.c.port)
# Built once (the recording process saves analyses after most of its commits): a statement
# built per call walks its values for SQLAlchemy's cache key first, an IN list's too.
_IDS: BindParameter[list[int]] = bindparam("ids_", expanding=True)
_PLACES = select(*_PLACE, EXCHANGES.c.started_at).where(EXCHANGES.c.id.in_(_IDS))
_DELETE_FINDINGS = delete(Finding).where(Finding.exchange_id.in_(_IDS))
_INSERT_FINDINGS = insert(Finding)
_IN = 500  # ids in one statement: SQLite caps the variables of a statement
_PAGE = 2000  # events a read of a long stream holds at once


class Place(NamedTuple):
    """Where and when an exchange was sent: what its price depends on besides its usage."""

    scheme: str
    host: str
    port: int
    started_at: dt.datetime


class KnowledgeTx:
    """One transaction of analyses: reads of exchanges and their events, and the writes."""

    def __init__(self, conn: Connection, session: Session | None = None) -> None:
        self._conn = conn
        self._session = session

    def exchange(self, xid: int) -> Exchange | None:
        """The exchange (detach it with :meth:`forget` once analysed)."""
        assert self._session is not None, "a writing transaction reads no exchange"
        return self._session.get(Exchange, xid)

    def forget(self, x: Exchange) -> None:
        """Keep the transaction small over a long reindex."""
        assert self._session is not None
        self._session.expunge(x)

    def error_rows(
        self, xid: int, limit: int
    ) -> Iterator[tuple[int, int, str | None, str | None, bytes]]:
        """The first rows of an HTTP error's body: (seq, offset_us, event, data, raw)."""
        stmt = (
            select(Event.seq, Event.offset_us, Event.event, Event.data, Event.raw)
            .where(Event.exchange_id == xid)
            .order_by(Event.seq)
            .limit(limit)
        )
        for seq, off, event, data, raw in self._conn.execute(stmt):
            yield seq, off, event, data, bytes(raw)

    def events(self, xid: int) -> Iterator[tuple[int, int, str | None, str | None]]:
        """Every event's (seq, offset_us, event, data), streamed a page at a time."""
        return self._paged(xid, Event.event)

    def messages(self, xid: int) -> Iterator[tuple[int, int, str | None, str | None]]:
        """A WebSocket session's (seq, offset_us, direction, data), a page at a time."""
        return self._paged(xid, Event.direction)

    def _paged(
        self, xid: int, third: InstrumentedAttribute[str | None]
    ) -> Iterator[tuple[int, int, str | None, str | None]]:
        stmt = (
            select(Event.seq, Event.offset_us, third, Event.data)
            .where(Event.exchange_id == xid)
            .order_by(Event.seq)
            .execution_options(yield_per=_PAGE)
        )
        yield from ((r[0], r[1], r[2], r[3]) for r in self._conn.execute(stmt))

    def chunks(self, xid: int) -> Iterator[tuple[int, int, bytes]]:
        """Every stored row's (seq, offset_us, raw): the wire chunks of a stream no framing
        cut, streamed a page at a time."""
        stmt = (
            select(Event.seq, Event.offset_us, Event.raw)
            .where(Event.exchange_id == xid)
            .order_by(Event.seq)
            .execution_options(yield_per=_PAGE)
        )
        for seq, off, raw in self._conn.execute(stmt):
            yield seq, off, bytes(raw)

    def places(self, ids: list[int]) -> dict[int, Place]:
        """Where and when each exchange was sent (one deleted meanwhile is absent)."""
        out: dict[int, Place] = {}
        for start in range(0, len(ids), _IN):
            out.update(
                (r.id, Place(r.scheme, r.host, r.port, r.started_at))
                for r in self._conn.execute(_PLACES, {"ids_": ids[start : start + _IN]})
            )
        return out

    def save(self, columns: list[dict[str, Any]], findings: list[dict[str, Any]]) -> None:
        """Each exchange's knowledge and price columns (``columns``: one dict per exchange,
        its id under ``xid_``) and its findings, replacing those it had."""
        if not columns:
            return
        self._conn.execute(_UPDATE, columns)
        ids = [c["xid_"] for c in columns]
        for start in range(0, len(ids), _IN):
            self._conn.execute(_DELETE_FINDINGS, {"ids_": ids[start : start + _IN]})
        if findings:
            self._conn.execute(_INSERT_FINDINGS, findings)

    def savepoint(self) -> AbstractContextManager[Any]:
        """A nested transaction: what fails inside it is undone alone."""
        return self._conn.begin_nested()


class KnowledgeRows:
    """Transactions of analyses on one store (its writing engine)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._engine = store.writing_engine

    @contextmanager
    def reading(self) -> Iterator[KnowledgeTx]:
        """A transaction that reads exchanges, then writes their analyses."""
        # IMMEDIATE on SQLite: this reads, then writes; a plain BEGIN would fail at once
        # ("database is locked") when another connection commits in between.
        with Session(self._engine) as s, s.begin():
            yield KnowledgeTx(s.connection(), s)

    @contextmanager
    def writing(self) -> Iterator[KnowledgeTx]:
        """A transaction that only writes analyses made elsewhere (the live ones)."""
        with self._engine.begin() as conn:
            yield KnowledgeTx(conn)

    def ids(self, *, stale_for: tuple[int, str] | None = None) -> list[int]:
        """Every exchange's id; with ``stale_for`` (analysis version, price data), only those
        analysed by another version or priced with other data."""
        stmt = select(Exchange.id).order_by(Exchange.id)
        if stale_for is not None:
            version, prices = stale_for
            stmt = stmt.where(
                (Exchange.analysis_version.is_(None))
                | (Exchange.analysis_version != version)
                | Exchange.price_data.is_(None)
                | (Exchange.price_data != prices)
            )
        with self._store.Session() as s:
            return list(s.scalars(stmt))

    def findings(self, exchange_id: int) -> list[Finding]:
        stmt = select(Finding).where(Finding.exchange_id == exchange_id).order_by(Finding.n)
        with self._store.Session() as s:
            return list(s.scalars(stmt))
