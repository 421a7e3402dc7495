"""The store's side of WebSocket sessions in cassettes: whether an export holds one.

A cassette says in its first line whether it carries a session (format version 3) or not
(version 2, as every cassette before sessions): the export asks here before it writes a line,
with the narrowing it will read its exchanges with.
"""

from __future__ import annotations

from sqlalchemy import select

from ssetape.storage.cassette_rows import Narrow
from ssetape.storage.models import Exchange
from ssetape.storage.store import Store
from ssetape.vocabulary import Transport

__all__ = ["holds_sessions"]


def holds_sessions(store: Store, narrow: Narrow | None = None, *, up_to: int | None = None) -> bool:
    """Whether any exchange ``narrow`` picks (all of them: None) is a WebSocket session;
    ``up_to``: of those with an id up to this (the last an export listed: those stored since
    are not in it)."""
    stmt = select(Exchange.id).where(Exchange.transport == Transport.WEBSOCKET.value)
    if up_to is not None:
        stmt = stmt.where(Exchange.id <= up_to)
    stmt = (narrow(stmt) if narrow is not None else stmt).limit(1)
    with store.engine.connect() as conn:
        return conn.execute(stmt).first() is not None
