"""What replay reads of a recorded WebSocket session: its upgrade's answer, how it ended, and
its messages with their sender, opcode, offset and exact payload.

A typed read of its own (replay's modules hold no SQL): the player asks it only for an
upgrade request, and it answers None for an exchange that is not a WebSocket session, which
the player then plays as HTTP. Messages are read a page at a time, each page bounded by rows
and by bytes (sizes are read first, payloads then by seq), so no read holds a session whole.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

from sqlalchemy import func, select

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
_SIZES = 5000  # rows whose sizes are read at once
SCAN_BYTES = 1 << 20  # payload bytes one read of a scan brings, at most (one row: any size)
_MESSAGE = Event.direction.is_not(None)


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

    def head(self, exchange_id: int) -> SessionHead | None:
        """The session ``exchange_id``; None if it is not one."""
        with self.store.engine.connect() as conn:
            row: Any = conn.execute(_HEAD.where(Exchange.id == exchange_id)).first()
        if row is None or row[0] != Transport.WEBSOCKET:
            return None
        return SessionHead(*row[1:])

    def scan(self, exchange_id: int) -> Iterator[FrameRow]:
        """Every message of the session by seq, read in pages of at most SCAN_BYTES of
        payload: what the caller does not keep is gone with its page."""
        after = -1
        while True:
            with self.store.engine.connect() as conn:
                sizes = conn.execute(
                    select(Event.seq, func.length(Event.raw))
                    .where(Event.exchange_id == exchange_id, Event.seq > after, _MESSAGE)
                    .order_by(Event.seq)
                    .limit(_SIZES)
                ).all()
            start = 0
            while start < len(sizes):
                end, held = start + 1, sizes[start][1] or 0
                while end < len(sizes) and held + (sizes[end][1] or 0) <= SCAN_BYTES:
                    held += sizes[end][1] or 0
                    end += 1
                yield from self._range(exchange_id, sizes[start][0], sizes[end - 1][0])
                start = end
            if len(sizes) < _SIZES:
                return
            after = sizes[-1][0]

    def _range(self, exchange_id: int, first: int, last: int) -> list[FrameRow]:
        with self.store.engine.connect() as conn:
            rows = conn.execute(
                select(Event.seq, Event.offset_us, Event.direction, Event.opcode, Event.raw)
                .where(Event.exchange_id == exchange_id, Event.seq.between(first, last), _MESSAGE)
                .order_by(Event.seq)
            ).all()
        return [FrameRow(r[0], r[1], r[2] or "", r[3] or "text", r[4]) for r in rows]

    def payloads(self, exchange_id: int, seqs: Sequence[int]) -> dict[int, tuple[str, bytes]]:
        """The opcode and payload of the messages ``seqs`` (at most _BATCH of them)."""
        with self.store.engine.connect() as conn:
            rows = conn.execute(
                select(Event.seq, Event.opcode, Event.raw).where(
                    Event.exchange_id == exchange_id, Event.seq.in_(list(seqs))
                )
            ).all()
        return {r[0]: (r[1] or "text", r[2]) for r in rows}
