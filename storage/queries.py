"""What the front ends read: one typed, paged query layer over the store.

Every reader (`list`, `show`, HAR export, the web viewer to come) asks here, never in SQL of
its own. Rows of an exchange are read in pages keyed on ``seq`` (``seq > last`` with a limit:
an index range, however far into a stream of millions), each page in a short session of its
own, so a reader holds one page at a time and never a snapshot of the whole stream.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

from sqlalchemy import Select, func, select

from ssetape.storage.filters import Filters
from ssetape.storage.models import Chunk, Event, Exchange
from ssetape.storage.store import Store

__all__ = ["PAGE", "EventSpan", "Queries", "RawEvent", "Timing"]

S = TypeVar("S", bound="Select[*tuple[Any, ...]]")

# Rows a page holds: big enough that a page costs one round trip per thousand rows, small
# enough that a page of large events stays a few megabytes.
PAGE = 1000


@dataclass(frozen=True, slots=True)
class EventSpan:
    """How many events an exchange has in a seq range, and when the last of them came."""

    count: int
    last_offset_us: int | None


@dataclass(frozen=True, slots=True)
class Timing:
    """What a timeline needs of one event: no raw bytes."""

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


class Queries:
    """Reads for the front ends; nothing here writes."""

    def __init__(self, store: Store, *, page: int = PAGE) -> None:
        self.store = store
        self.page = page

    # -- exchanges -----------------------------------------------------------------------

    def exchange(self, id_or_uid: int | str) -> Exchange | None:
        """One exchange by id, or by uid (see :meth:`Store.exchange`)."""
        return self.store.exchange(id_or_uid)

    def exchanges(
        self, filters: Filters | None = None, *, limit: int | None = None, newest_first: bool = True
    ) -> list[Exchange]:
        """Exchanges matching ``filters``, by start time."""
        where = filters.apply if filters is not None else None
        return self.store.exchanges(limit=limit, order_desc=newest_first, where=where)

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
        cols = select(Event.seq, Event.offset_us, Event.event, Event.data)
        after = -1
        while True:
            stmt = cols.where(Event.exchange_id == exchange_id, Event.seq > after)
            with self.store.Session() as s:
                rows = s.execute(self._page(stmt, Event.seq, None, None)).all()
            yield from (Timing(*row) for row in rows)
            if len(rows) < self.page:
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
