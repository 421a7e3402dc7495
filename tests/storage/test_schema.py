"""The models and the migrations describe one schema: a store the migrations made, compared
with the models by Alembic's own autogenerate comparison, differs only in what the migrations
give one backend on purpose (storage.models.backend_only)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import func, insert, select

from ssetape.storage.models import Event, Exchange
from ssetape.storage.store import Store


def test_deleting_an_exchange_through_the_orm_leaves_no_event(
    store: Store, exchange_fields: Callable[..., dict[str, Any]]
) -> None:
    """PostgreSQL's events have no foreign key (migration 0009): the ORM deletes them."""
    with store.Session.begin() as s:
        x = Exchange(uid="ab" * 16, **exchange_fields())
        s.add(x)
        s.flush()
        xid = x.id
        s.execute(insert(Event), [
            {"exchange_id": xid, "seq": i, "offset_us": i, "raw": b"data: x\n\n"} for i in range(3)
        ])  # fmt: skip
    with store.Session.begin() as s:
        s.delete(s.get_one(Exchange, xid))
    with store.Session() as s:
        left = s.scalar(select(func.count()).select_from(Event).where(Event.exchange_id == xid))
    assert left == 0
