"""What replay reads of a store: the recordings its request index learns (newest first
looked at, then only those after what it has), and, for the player, a recording's rows.

Replay's modules hold no SQL (issue 37): their reads are these typed methods.
"""

from __future__ import annotations

from typing import NamedTuple

from sqlalchemy import func, select

from ssetape.storage.models import Exchange
from ssetape.storage.store import Store

__all__ = ["TapeEntry", "TapeReads"]

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
