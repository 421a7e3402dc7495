"""What replay reads of a recorded WebSocket session: its upgrade's answer, how it ended, and
every message with its sender, opcode, offset and exact payload.

A typed read of its own (replay's modules hold no SQL): the player asks it only for an
upgrade request, and it answers None for an exchange that is not a WebSocket session, which
the player then plays as HTTP.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from sqlalchemy import select

from ssetape.storage.models import Event, Exchange
from ssetape.storage.store import Store
from ssetape.vocabulary import Transport

__all__ = ["FrameRow", "SessionFrames", "SessionHead"]


class SessionHead(NamedTuple):
    """The exchange's fields a session's replay needs."""

    id: int
    state: str
    status: int | None
    error: str | None
    path: str
    response_headers: list[list[str]] | None
    ttfb_us: int | None
    duration_us: int | None


class FrameRow(NamedTuple):
    """One recorded message: ``direction`` client or server, ``opcode`` text or binary."""

    seq: int
    offset_us: int
    direction: str
    opcode: str
    raw: bytes


_HEAD = select(Exchange.transport, *(getattr(Exchange, name) for name in SessionHead._fields))
_BATCH = 500  # ids in one IN list
_FRAMES = select(Event.seq, Event.offset_us, Event.direction, Event.opcode, Event.raw)


class SessionFrames:
    """Reads of recorded sessions, each in a connection of its own (call them off the loop)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def sessions_among(self, ids: Sequence[int]) -> list[int]:
        """Those of ``ids`` that are WebSocket sessions, in order."""
        found: set[int] = set()
        with self.store.engine.connect() as conn:
            for i in range(0, len(ids), _BATCH):
                batch = list(ids[i : i + _BATCH])
                found.update(conn.execute(
                    select(Exchange.id).where(
                        Exchange.id.in_(batch), Exchange.transport == Transport.WEBSOCKET
                    )
                ).scalars())  # fmt: skip
        return [xid for xid in ids if xid in found]

    def session(self, exchange_id: int) -> tuple[SessionHead, list[FrameRow]] | None:
        """The session ``exchange_id`` and its messages by seq; None if it is not one."""
        with self.store.engine.connect() as conn:
            row: Any = conn.execute(_HEAD.where(Exchange.id == exchange_id)).first()
            if row is None or row[0] != Transport.WEBSOCKET:
                return None
            rows = conn.execute(
                _FRAMES.where(
                    Event.exchange_id == exchange_id, Event.direction.is_not(None)
                ).order_by(Event.seq)
            ).all()
        head = SessionHead(*row[1:])
        return head, [FrameRow(r[0], r[1], r[2] or "", r[3] or "text", r[4]) for r in rows]
