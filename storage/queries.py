"""What the front ends read: one typed, paged query layer over the store.

Every reader (`list`, `show`, `stats`, HAR export, the web viewer) asks here, never in SQL of
its own. Exchanges come newest first in keyset pages: a page after exchange N is the index
range below N's (started_at, id), as fast on the millionth page as on the first (no OFFSET).

Rows of an exchange are read in pages keyed on ``seq`` (``seq > last`` with a limit:
an index range, however far into a stream of millions), each page in a short session of its
own, so a reader holds one page at a time and never a snapshot of the whole stream.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar, cast

from sqlalchemy import Row, Select, and_, func, null, or_, select

from ssetape.storage.filters import ExchangeFilter, Picked
from ssetape.storage.models import Chunk, Event, Exchange, Finding
from ssetape.storage.narrowing import Narrowing
from ssetape.storage.page_reads import exchange_key, keyset_page
from ssetape.storage.sorted_pages import Sort, SortedPages
from ssetape.storage.standby import StandbyState, standby_state
from ssetape.storage.stat_totals import StatTotals
from ssetape.storage.store import Store

__all__ = [
    "GROUP_BY", "PAGE", "EventSpan", "Queries", "RawEvent", "SpanRow", "StatRow", "Timing",
]  # fmt: skip

S = TypeVar("S", bound="Select[*tuple[Any, ...]]")

# The columns `ssetape stats --by` groups on.
GROUP_BY = {
    "model": Exchange.model,
    "host": Exchange.host,
    "api": Exchange.api,
    "outcome": Exchange.outcome,
    "status": Exchange.status,
    "session": Exchange.session,
}

# Rows a page holds: big enough that a page costs one round trip per thousand rows, small
# enough that a page of large events stays a few megabytes.
PAGE = 1000
_TIMINGS_PER_PAGE = 5


@dataclass(frozen=True, slots=True)
class EventSpan:
    """How many events an exchange has in a seq range, and when the last of them came."""

    count: int
    last_offset_us: int | None


class Timing(NamedTuple):
    """What a timeline needs of one event: no raw bytes. (A tuple: a timeline reads one per
    event, and a tuple is made in a third of a frozen dataclass's time.)"""

    seq: int
    offset_us: int
    event: str | None
    data: str | None


class RawEvent(NamedTuple):
    """One stored event, as a plain row."""

    seq: int
    offset_us: int
    event: str | None
    data: str | None
    raw: bytes


class StatRow(NamedTuple):
    """What `ssetape stats` counts of one exchange; ``group`` is its value of the grouping
    column (None when not grouped)."""

    group: Any
    outcome: str | None
    status: int | None
    state: str
    fault: str | None
    ttfb_us: int | None
    ttft_us: int | None
    input_tokens: int | None
    output_tokens: int | None
    tokens_per_s: float | None
    cost_nusd: int | None


class Queries:
    """Reads for the front ends; nothing here writes."""

    def __init__(self, store: Store, *, page: int = PAGE) -> None:
        self.store = store
        self.page = page
        self.narrowing = Narrowing(store)

    # -- exchanges -----------------------------------------------------------------------

    def exchange(self, id_or_uid: int | str) -> Exchange | None:
        """One exchange by id, or by uid (see :func:`exchange_key`): None for an id no column
        holds (past 64 bits, 5,000 digits), not an error."""
        where = exchange_key(id_or_uid)
        if where is None:
            return None
        with self.store.Session() as s:
            return s.scalar(select(Exchange).where(where))

    def exchanges(
        self,
        filters: ExchangeFilter | None = None,
        *,
        limit: int | None = None,
        before: int | None = None,
        newest_first: bool = True,
        sort: Sort | None = None,
        cursor: str | None = None,
    ) -> list[Exchange]:
        """Exchanges matching ``filters`` by start time, newest first unless told otherwise,
        in keyset pages (``before``: the id of the last exchange of the previous page; see
        :func:`ssetape.storage.page_reads.keyset_page`). ``sort``: in that order instead, from
        ``cursor`` on (see :class:`ssetape.storage.sorted_pages.SortedPages`)."""
        if sort is not None:
            return SortedPages(self.store, self.narrowing).exchanges(
                filters, sort, limit=limit, cursor=cursor
            )
        stmt = keyset_page(
            select(Exchange), self.narrowing, filters, limit=limit, before=before,
            newest_first=newest_first,
        )  # fmt: skip
        with self.store.Session() as s:
            return list(s.scalars(stmt))

    def exchanges_by_id(self, ids: list[int]) -> list[Exchange]:
        """These exchanges (those that exist), by id."""
        if not ids:
            return []
        stmt = select(Exchange).where(Exchange.id.in_(ids)).order_by(Exchange.id)
        with self.store.Session() as s:
            return list(s.scalars(stmt))

    def exchanges_after(
        self, after_id: int, filters: ExchangeFilter | None = None, *, limit: int = 100
    ) -> list[Exchange]:
        """Exchanges stored after exchange ``after_id``, oldest first (ids only grow): what a
        live view has not shown yet."""
        stmt = select(Exchange).where(Exchange.id > after_id).order_by(Exchange.id).limit(limit)
        if filters is not None:
            stmt = filters.apply(stmt)
        with self.store.Session() as s:
            return list(s.scalars(stmt))

    @staticmethod
    def after(exchange_id: int) -> Callable[[S], S]:
        """A narrowing (as the exporters take) to the exchanges stored after one."""

        def narrow(stmt: S) -> S:
            return stmt.where(Exchange.id > exchange_id)

        return narrow

    @staticmethod
    def only(exchange_id: int) -> Callable[[S], S]:
        """A narrowing (as the exporters take) to one exchange."""

        def narrow(stmt: S) -> S:
            return stmt.where(Exchange.id == exchange_id)

        return narrow

    @staticmethod
    def picked(filters: ExchangeFilter, picked: Picked) -> Callable[[S], S]:
        """A narrowing (as the exporters take) to the exchanges ``filters`` and ``picked``
        both match."""

        def narrow(stmt: S) -> S:
            return picked.apply(filters.apply(stmt))

        return narrow

    def standby(self) -> StandbyState | None:
        """How current the store is when it is read through a hot standby (else None)."""
        return standby_state(self.store.engine)

    def last_id(self) -> int:
        """The newest exchange's id, 0 for an empty store."""
        with self.store.Session() as s:
            return int(s.scalar(select(func.max(Exchange.id))) or 0)

    def findings(self, exchange_id: int) -> list[Finding]:
        stmt = select(Finding).where(Finding.exchange_id == exchange_id).order_by(Finding.n)
        with self.store.Session() as s:
            return list(s.scalars(stmt))

    def finding_counts(self, ids: list[int]) -> dict[int, int]:
        """How many findings each of these exchanges has (those with none are left out)."""
        if not ids:
            return {}
        stmt = (
            select(Finding.exchange_id, func.count())
            .where(Finding.exchange_id.in_(ids))
            .group_by(Finding.exchange_id)
        )
        with self.store.Session() as s:
            return {int(i): int(n) for i, n in s.execute(stmt)}

    def stat_rows(self, by: str | None, filters: ExchangeFilter) -> Iterator[StatRow]:
        """What `ssetape stats` counts, one row per matching exchange, streamed from the
        server (``by``: a key of :data:`GROUP_BY`, None for one group)."""
        key = GROUP_BY[by] if by else null()
        stmt = self.narrowing.apply(
            select(
                key.label("group"),
                Exchange.outcome,
                Exchange.status,
                Exchange.state,
                Exchange.fault,
                Exchange.ttfb_us,
                Exchange.ttft_us,
                Exchange.input_tokens,
                Exchange.output_tokens,
                Exchange.tokens_per_s,
                Exchange.cost_nusd,
            ),
            filters,
        )
        with self.store.engine.connect() as conn:  # Core: rows, no ORM per-row work
            rows = conn.execute(stmt.execution_options(yield_per=10_000))
            # Each row has StatRow's fields by name and in order: made into none (a tenth
            # of the time for tens of thousands of rows).
            for part in rows.partitions():
                yield from cast("list[StatRow]", part)

    def stat_totals(self, by: str | None, filters: ExchangeFilter) -> Iterator[StatTotals]:
        """What `ssetape stats` shows, a row per group, added up by the database
        (PostgreSQL: it has ``percentile_cont``; see :class:`StatTotals`)."""
        return StatTotals.read(self.narrowing, GROUP_BY[by] if by else None, filters)

    # -- events --------------------------------------------------------------------------

    def events_page(
        self, exchange_id: int, *, after_seq: int = -1, stop_seq: int | None = None,
        limit: int | None = None,
    ) -> list[Event]:  # fmt: skip
        """One page: the events with ``after_seq < seq < stop_seq``, by seq."""
        stmt = select(Event).where(Event.exchange_id == exchange_id, Event.seq > after_seq)
        with self.store.Session() as s:
            return list(s.scalars(self._page(stmt, Event.seq, stop_seq, limit)))

    def events(
        self, exchange_id: int, *, start: int = 0, stop: int | None = None
    ) -> Iterator[Event]:
        """The events with ``start <= seq < stop`` (all from ``start`` if ``stop`` is None),
        read a page at a time."""
        after = start - 1
        while True:
            page = self.events_page(exchange_id, after_seq=after, stop_seq=stop)
            yield from page
            if len(page) < self.page:
                return
            after = page[-1].seq

    def event_span(self, exchange_id: int, *, start: int = 0, stop: int | None = None) -> EventSpan:
        """How many events ``start <= seq < stop`` holds (an index count, no row read) and
        the offset of the last of them by seq (one index lookup): a stream's events are
        stored in the order they came."""
        mine = [Event.exchange_id == exchange_id, Event.seq >= start]
        if stop is not None:
            mine.append(Event.seq < stop)
        last = select(Event.offset_us).where(*mine).order_by(Event.seq.desc()).limit(1)
        with self.store.Session() as s:
            count = s.scalar(select(func.count()).select_from(Event).where(*mine))
            offset = s.scalar(last)
        return EventSpan(int(count or 0), offset)

    def event_bytes(self, exchange_id: int) -> int:
        """The size of the stream as it was sent: its events' raw bytes summed."""
        stmt = select(func.coalesce(func.sum(func.length(Event.raw)), 0))
        with self.store.Session() as s:
            return int(s.scalar(stmt.where(Event.exchange_id == exchange_id)) or 0)

    def timings(self, exchange_id: int) -> Iterator[Timing]:
        """Every event's seq, offset, name and data (not its raw bytes), a page at a time."""
        return map(Timing._make, self.timing_rows(exchange_id))

    def timing_rows(self, exchange_id: int) -> Iterator[Row[int, int, str | None, str | None]]:
        """:meth:`timings` as the rows the driver gives, for a reader of a hundred thousand
        (a timeline): (seq, offset_us, event, data)."""
        cols = select(Event.seq, Event.offset_us, Event.event, Event.data)
        after = -1
        while True:
            stmt = cols.where(Event.exchange_id == exchange_id, Event.seq > after)
            # A connection, not an ORM session: these are plain rows. Rows without their raw
            # bytes: five times as many a page (a round trip each, on PostgreSQL).
            page = _TIMINGS_PER_PAGE * self.page
            with self.store.engine.connect() as conn:
                rows = conn.execute(self._page(stmt, Event.seq, None, page)).all()
            yield from rows
            if len(rows) < page:
                return
            after = rows[-1][0]

    def event_rows(self, exchange_id: int) -> Iterator[RawEvent]:
        """Every event as a plain row (no ORM object: a third of the time per row), a page at
        a time: for writers that go through millions (HAR export)."""
        cols = select(Event.seq, Event.offset_us, Event.event, Event.data, Event.raw)
        after = -1
        while True:
            stmt = cols.where(Event.exchange_id == exchange_id, Event.seq > after)
            with self.store.Session() as s:
                rows = s.execute(self._page(stmt, Event.seq, None, None)).all()
            yield from (RawEvent(*row) for row in rows)
            if len(rows) < self.page:
                return
            after = rows[-1][0]

    def chunks(self, exchange_id: int) -> Iterator[Chunk]:
        """The wire chunks of an encoded stream, a page at a time."""
        after = -1
        while True:
            stmt = select(Chunk).where(Chunk.exchange_id == exchange_id, Chunk.seq > after)
            with self.store.Session() as s:
                page = list(s.scalars(self._page(stmt, Chunk.seq, None, None)))
            yield from page
            if len(page) < self.page:
                return
            after = page[-1].seq

    def _page(self, stmt: S, seq: Any, stop: int | None, limit: int | None) -> S:
        if stop is not None:
            stmt = stmt.where(seq < stop)
        return stmt.order_by(seq).limit(self.page if limit is None else limit)

    def stat_series(self, by: str | None, filters: ExchangeFilter) -> Iterator[SeriesRow]:
        """What the stats page charts, one row per matching exchange, streamed: its group
        (as :meth:`stat_rows`), start time, what tells an error and whose, TTFB and TTFT."""
        key = GROUP_BY[by] if by else Exchange.id
        x = Exchange
        cols = (x.started_at, x.outcome, x.status, x.state, x.fault)
        stmt = self.narrowing.apply(select(key, *cols, Exchange.ttfb_us, Exchange.ttft_us), filters)
        with self.store.engine.connect() as conn:  # Core: rows, no ORM per-row work
            for row in conn.execute(stmt.execution_options(yield_per=10_000)):
                yield SeriesRow(*row)

    def stalled(
        self, min_gap_us: int, filters: ExchangeFilter, *, limit: int, before: int | None = None
    ) -> list[Exchange]:
        """Exchanges whose longest pause between two events reached ``min_gap_us``, newest
        first, in pages keyed as :meth:`exchanges` (``before``: the last id of the previous
        page)."""
        stmt = self.narrowing.apply(
            select(Exchange).where(Exchange.gap_max_us >= min_gap_us), filters, paged=True
        )
        if before is not None:
            at = select(Exchange.started_at).where(Exchange.id == before).scalar_subquery()
            stmt = stmt.where(
                or_(Exchange.started_at < at, and_(Exchange.started_at == at, Exchange.id < before))
            )
        stmt = stmt.order_by(Exchange.started_at.desc(), Exchange.id.desc()).limit(limit)
        with self.store.Session() as s:
            return list(s.scalars(stmt))

    def findings_of(
        self, code: str | None, filters: ExchangeFilter, *, limit: int,
        before: tuple[int, int] | None = None,
    ) -> list[tuple[Finding, Exchange]]:  # fmt: skip
        """Findings (of ``code``, or all) with their exchange, newest exchange first, in pages
        keyed on (exchange id, n): ``before`` is the last of the previous page."""
        stmt = self.narrowing.apply(select(Finding, Exchange).join(Exchange), filters)
        if code:
            stmt = stmt.where(Finding.code == code)
        if before is not None:
            xid, n = before
            stmt = stmt.where(
                or_(Finding.exchange_id < xid, and_(Finding.exchange_id == xid, Finding.n > n))
            )
        stmt = stmt.order_by(Finding.exchange_id.desc(), Finding.n).limit(limit)
        with self.store.Session() as s:
            return [(f, x) for f, x in s.execute(stmt).tuples()]

    def span_rows(self, by: str | None, filters: ExchangeFilter) -> Iterator[SpanRow]:
        """When each matching exchange started and how long it took, with its group (as
        :meth:`stat_rows`), streamed: a group's wall time runs from its first start to its
        last end."""
        key = GROUP_BY[by] if by else Exchange.id
        stmt = self.narrowing.apply(select(key, Exchange.started_at, Exchange.duration_us), filters)
        with self.store.engine.connect() as conn:  # Core: rows, no ORM per-row work
            for row in conn.execute(stmt.execution_options(yield_per=10_000)):
                yield SpanRow(*row)


class SeriesRow(NamedTuple):
    """One exchange as the stats page's charts see it (see :meth:`Queries.stat_series`)."""

    group: Any
    started_at: dt.datetime
    outcome: str | None
    status: int | None
    state: str
    fault: str | None
    ttfb_us: int | None
    ttft_us: int | None


class SpanRow(NamedTuple):
    """One exchange's place in time (see :meth:`Queries.span_rows`)."""

    group: Any
    started_at: dt.datetime
    duration_us: int | None
