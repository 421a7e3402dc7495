"""What replay reads of a store: the recordings its request index learns (newest first
looked at, then only those after what it has), and, for the player, a recording's rows.

Replay's modules hold no SQL (issue 37): their reads are these typed methods.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from sqlalchemy import func, select

from ssetape.storage.models import Chunk, Event, Exchange
from ssetape.storage.store import Store

__all__ = ["Recording", "TapeEntry", "TapeReads"]

_NEWEST = select(func.max(Exchange.id))


class TapeEntry(NamedTuple):
    """What the request index knows of one recording: where it went, what it asked, and
    whether it can be played."""

    id: int
    state: str
    status: int | None
    error: str | None
    method: str
    scheme: str
    host: str
    port: int
    path: str
    query: str
    request_body: bytes | None
    gap_seq: int | None


_ENTRY = select(*(getattr(Exchange, name) for name in TapeEntry._fields))
Row = tuple[int, int, bytes]  # (seq, offset_us, bytes) of an event or wire chunk


class Recording(NamedTuple):
    """What the player reads of one recording: the exchange, whether its stream is sent
    from its wire chunks (an encoded stream) or its events, and its rows when they are few
    enough to hold (None: read a page at a time, :meth:`TapeReads.page`)."""

    exchange: Exchange
    wire: bool
    rows: list[Row] | None


def _source(wire: bool) -> tuple[Any, Any]:
    """The table a stream is sent from, and its bytes column."""
    return (Chunk, Chunk.data) if wire else (Event, Event.raw)


class TapeReads:
    """Replay's reads, each in a connection of its own."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def entries_after(self, floor: int, known: int) -> tuple[int | None, list[TapeEntry] | None]:
        """The newest recording's id, and the recordings after ``floor``; None for them when
        the newest is ``known`` and nothing after ``floor`` can have changed: one cheap look
        first, for a storm of misses each asking for what was committed before it."""
        with self.store.engine.connect() as conn:
            newest = conn.execute(_NEWEST).scalar()
            if newest is None or (newest == known and floor >= newest):
                return newest, None
            rows = conn.execute(
                _ENTRY.where(Exchange.id > floor)
                # Pruned to its summary (`ssetape prune --events-only`): nothing to play.
                .where(Exchange.events_pruned_at.is_(None))
                .order_by(Exchange.id)
            ).all()
        return newest, [TapeEntry(*r) for r in rows]

    def recording(self, exchange_id: int, *, lazy_rows: int, lazy_bytes: int) -> Recording | None:
        """The recording ``exchange_id`` (None if there is none): its rows read now unless
        there are more than ``lazy_rows`` or ``lazy_bytes`` of them."""
        with self.store.Session() as s:
            x = s.get(Exchange, exchange_id)
            if x is None:
                return None
            if not x.is_stream or x.status is None:
                return Recording(x, False, [])
            # Encoded streams replay their wire chunks, plain ones their events.
            wire = s.scalar(select(Chunk.seq).where(Chunk.exchange_id == exchange_id).limit(1))
            table, data = _source(wire is not None)
            mine = table.exchange_id == exchange_id
            size = select(func.count(), func.coalesce(func.sum(func.length(data)), 0))
            count, nbytes = s.execute(size.where(mine)).one()
            if count > lazy_rows or nbytes > lazy_bytes:
                return Recording(x, wire is not None, None)
            rows = s.execute(
                select(table.seq, table.offset_us, data).where(mine).order_by(table.seq)
            )
            return Recording(x, wire is not None, [(r[0], r[1], r[2]) for r in rows])

    def page(
        self, exchange_id: int, wire: bool, after: int, stop: int | None, limit: int
    ) -> list[Row]:
        """One page of a long recording's rows: those after seq ``after`` (and before
        ``stop``, if given)."""
        table, data = _source(wire)
        stmt = select(table.seq, table.offset_us, data)
        stmt = stmt.where(table.exchange_id == exchange_id, table.seq > after)
        if stop is not None:
            stmt = stmt.where(table.seq < stop)
        with self.store.Session() as s:
            return [(r[0], r[1], r[2]) for r in s.execute(stmt.order_by(table.seq).limit(limit))]
