"""What the front ends read of sessions: each session's totals, and one session's calls.

A session is the exchanges that share a ``session`` name (x-ssetape-session, `record
--session`, a pytest node id); exchanges without one belong to none. Totals are aggregated by
the database (one row per session, never a row per call in Python), and both reads come in
keyset pages: sessions by their last call's start, newest first; a session's calls by
(started_at, id), oldest first, read through the session index.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any, NamedTuple, TypeVar

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Select,
    and_,
    case,
    cast,
    extract,
    func,
    or_,
    select,
)

from ssetape.storage.filters import ExchangeFilter, failed_clause
from ssetape.storage.models import Exchange
from ssetape.storage.narrowing import Narrowing
from ssetape.storage.store import Store

__all__ = ["SessionCall", "SessionQueries", "SessionTotals", "WindowFilter"]

S = TypeVar("S", bound="Select[*tuple[Any, ...]]")


@dataclasses.dataclass(frozen=True)
class WindowFilter(ExchangeFilter):
    """:class:`ExchangeFilter` with an end: exchanges started before ``until`` too."""

    until: dt.datetime | None = None

    def apply(self, stmt: S) -> S:
        stmt = super().apply(stmt)
        if self.until is not None:
            stmt = stmt.where(Exchange.started_at < self.until)
        return stmt


@dataclasses.dataclass(frozen=True, slots=True)
class SessionTotals:
    """One session summed over its calls (those in the window asked for)."""

    name: str
    calls: int
    failed: int  # vocabulary.is_failed
    input_tokens: int  # sums of what the streams reported; usage_reported says how many did
    output_tokens: int
    usage_reported: int
    # Time its calls spent waiting for their first tokens: calls may overlap, so it can be
    # more than the wall time.
    ttft_total_us: int
    first_start: dt.datetime
    last_start: dt.datetime
    # From the first call's start to the last call's end (a call not answered yet ends at its
    # start).
    wall_us: int
    # The sum over its priced calls (None when none was priced: never 0), and how many.
    cost_nusd: int | None = None
    priced: int = 0


class SessionCall(NamedTuple):
    """One call of a session, as its timeline and the MCP tool show it: no bodies, no text."""

    id: int
    started_at: dt.datetime
    method: str
    host: str
    path: str
    api: str | None
    model: str | None
    status: int | None
    state: str
    outcome: str | None
    failed: bool  # vocabulary.is_failed
    ttfb_us: int | None
    ttft_us: int | None
    duration_us: int | None
    input_tokens: int | None
    output_tokens: int | None
    cost_nusd: int | None  # None: no price (price_note says why) or not priced yet


def _is_failed() -> ColumnElement[int]:
    """1 for a call that failed, else 0 (an expression: summed by the database), as
    storage.filters.failed_clause judges it, so a session's failures match `stats`."""
    return case((failed_clause(), 1), else_=0)


_CALL_COLUMNS = (
    Exchange.id, Exchange.started_at, Exchange.method, Exchange.host, Exchange.path,
    Exchange.api, Exchange.model, Exchange.status, Exchange.state, Exchange.outcome,
    _is_failed(), Exchange.ttfb_us, Exchange.ttft_us, Exchange.duration_us,
    Exchange.input_tokens, Exchange.output_tokens, Exchange.cost_nusd,
)  # fmt: skip


class SessionQueries:
    """Reads of sessions for the front ends; nothing here writes."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def _epoch_us(self, col: Any) -> ColumnElement[int]:
        """``col`` (a UTC datetime) as microseconds since 1970, exactly, on either backend:
        a session's wall time ends at its latest start plus duration, summed in SQL.
        SQLite holds the datetime as text, ``YYYY-MM-DD HH:MM:SS.ffffff`` (SQLAlchemy writes
        all six digits): whole seconds from strftime, microseconds from the text (its
        julianday keeps milliseconds only)."""
        if self.store.is_sqlite:
            seconds = cast(func.strftime("%s", col), BigInteger)
            return seconds * 1_000_000 + cast(func.substr(col, 21, 6), BigInteger)
        return cast(func.round(extract("epoch", col) * 1_000_000), BigInteger)

    def _totals_columns(self) -> tuple[Any, ...]:
        start_us = self._epoch_us(Exchange.started_at)
        end_us = start_us + func.coalesce(Exchange.duration_us, 0)
        reported = case(
            (or_(Exchange.input_tokens.is_not(None), Exchange.output_tokens.is_not(None)), 1),
            else_=0,
        )
        return (
            func.count(),
            func.sum(_is_failed()),
            func.coalesce(func.sum(Exchange.input_tokens), 0),
            func.coalesce(func.sum(Exchange.output_tokens), 0),
            func.sum(reported),
            func.coalesce(func.sum(Exchange.ttft_us), 0),
            func.min(Exchange.started_at),
            func.max(Exchange.started_at),
            func.max(end_us) - func.min(start_us),
            func.sum(Exchange.cost_nusd),
            func.count(Exchange.cost_nusd),
        )

    @staticmethod
    def _totals(name: str, row: Any) -> SessionTotals:
        calls, failed, tin, tout, reported, ttft, first, last, wall, cost, priced = row
        return SessionTotals(
            name, int(calls), int(failed or 0), int(tin), int(tout), int(reported or 0),
            int(ttft), first, last, max(0, int(wall or 0)),
            None if not priced else int(cost), int(priced),
        )  # fmt: skip

    def sessions(
        self, filters: ExchangeFilter | None = None, *, limit: int,
        before: tuple[dt.datetime, str] | None = None,
    ) -> list[SessionTotals]:  # fmt: skip
        """The sessions with calls matching ``filters``, newest last call first, each summed
        over those calls. ``before`` is (last_start, name) of the last session of the previous
        page: this page starts right after it."""
        last = func.max(Exchange.started_at)
        stmt = (
            select(Exchange.session, *self._totals_columns())
            .where(Exchange.session.is_not(None))
            .group_by(Exchange.session)
        )
        if filters is not None:
            stmt = Narrowing(self.store).apply(stmt, filters)
        if before is not None:
            at, name = before
            stmt = stmt.having(or_(last < at, and_(last == at, Exchange.session < name)))
        stmt = stmt.order_by(last.desc(), Exchange.session.desc()).limit(limit)
        with self.store.engine.connect() as conn:
            return [self._totals(row[0], row[1:]) for row in conn.execute(stmt)]

    def totals(self, name: str, filters: ExchangeFilter | None = None) -> SessionTotals | None:
        """One session's totals (over its calls matching ``filters``); None if it has none."""
        stmt = select(*self._totals_columns()).where(Exchange.session == name)
        if filters is not None:
            stmt = Narrowing(self.store).apply(stmt, filters)
        with self.store.engine.connect() as conn:
            row = conn.execute(stmt).one()
        return None if not row[0] else self._totals(name, row)

    def calls(
        self, name: str, *, limit: int, after: int | None = None,
        filters: ExchangeFilter | None = None,
    ) -> list[SessionCall]:  # fmt: skip
        """A page of the session's calls in start order; ``after`` is the id of the last call
        of the previous page."""
        stmt = select(*_CALL_COLUMNS).where(Exchange.session == name)
        if filters is not None:
            stmt = Narrowing(self.store).apply(stmt, filters)
        if after is not None:
            at = select(Exchange.started_at).where(Exchange.id == after).scalar_subquery()
            stmt = stmt.where(
                Exchange.started_at >= at,
                or_(Exchange.started_at > at, and_(Exchange.started_at == at, Exchange.id > after)),
            )
        stmt = stmt.order_by(Exchange.started_at, Exchange.id).limit(limit)
        with self.store.engine.connect() as conn:
            rows = conn.execute(stmt).all()
        # started_at through a plain connection keeps its column type (UTC, aware).
        return [SessionCall._make((*row[:10], bool(row[10]), *row[11:])) for row in rows]
