"""What the turns of a WebSocket session are read from: its messages, without their raw bytes.

A session's turns (``ssetape.analysis.turns``) are derived from its stored messages (``events``
rows with a direction) each time a surface shows them: the stored knowledge keeps the
session's totals, not its turns, so nothing needs a migration. This read selects only what the
derivation and the two-lane timeline use: seq, offset, who sent it, the opcode, the kind the
recorder named it by, the text, and the payload's size (``length(raw)``, counted by the
database: a binary audio frame's bytes never leave it). Pages are keyed on ``seq`` as every
read of a stream's rows is (``storage.queries``), one short connection each.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from sqlalchemy import bindparam, func, select

from ssetape.storage.models import Event
from ssetape.storage.store import Store

__all__ = ["MESSAGES_PAGE", "SessionMessage", "TurnReads"]

# Messages a page holds: as storage.queries reads timings (rows without raw bytes), though a
# message's text may be an audio delta of some kilobytes.
MESSAGES_PAGE = 2000


class SessionMessage(NamedTuple):
    """One stored WebSocket message as the turn analysis and the timeline read it."""

    seq: int
    offset_us: int
    direction: str | None  # vocabulary.Direction; None on a row stored as an HTTP event
    opcode: str | None  # vocabulary.Opcode
    event: str | None  # the kind the recorder named it by ("response.created", "setup")
    data: str | None  # the payload as text; None when it is not UTF-8
    size: int  # the payload's bytes


_MESSAGES = (
    select(
        Event.seq,
        Event.offset_us,
        Event.direction,
        Event.opcode,
        Event.event,
        Event.data,
        func.length(Event.raw),
    )
    .where(Event.exchange_id == bindparam("xid"), Event.seq > bindparam("after"))
    .order_by(Event.seq)
    .limit(bindparam("limit"))
)


class TurnReads:
    """Reads of one store for the turns of its sessions; nothing here writes."""

    def __init__(self, store: Store, *, page: int = MESSAGES_PAGE) -> None:
        self.store = store
        self.page = page

    def messages(self, exchange_id: int) -> Iterator[SessionMessage]:
        """Every message of a session in order, a page at a time (never all in memory)."""
        after = -1
        while True:
            # A connection, not an ORM session: plain rows, as storage.queries reads timings.
            with self.store.engine.connect() as conn:
                rows = conn.execute(
                    _MESSAGES, {"xid": exchange_id, "after": after, "limit": self.page}
                ).all()
            for seq, offset_us, direction, opcode, event, data, size in rows:
                yield SessionMessage(seq, offset_us, direction, opcode, event, data, size or 0)
            if len(rows) < self.page:
                return
            after = rows[-1][0]
