"""What the writer asks the database per batch: a few statements, however many exchanges the
batch holds (each statement costs the recording process more CPU than the rows it writes)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import event, select

from ssetape.records import EventRow
from ssetape.storage.models import Exchange
from ssetape.storage.store import Store
from ssetape.storage.writer import Writer

EXCHANGES = 40


def uid(i: int) -> str:
    return f"{i:032x}"


def test_a_batch_of_many_exchanges_takes_a_few_statements(
    store: Store,
    exchange_fields: Callable[..., dict[str, Any]],
    event_rows: Callable[..., list[EventRow]],
) -> None:
    statements: list[str] = []

    def seen(*args: Any) -> None:
        if "exchanges" in args[2]:  # (PostgreSQL's day partitions are looked after too)
            statements.append(args[2])

    # Batches are cut by flush() only: the interval is long.
    writer = Writer(store, flush_interval=30.0)
    event.listen(store.writing_engine, "before_cursor_execute", seen)
    writer.start()
    try:
        for i in range(EXCHANGES):  # one batch: every exchange begins, with its first events
            writer.begin(uid(i), **exchange_fields(host=f"h{i}"))
            writer.add_events(uid(i), event_rows(0, 3))
        assert writer.flush(30)
        begun, statements[:] = list(statements), []
        for i in range(EXCHANGES):  # another: every exchange's head, more events, its end
            head = [["content-type", "text/event-stream"]]
            writer.update(uid(i), status=200, response_headers=head)
            writer.add_events(uid(i), event_rows(3, 3))
            writer.finish(uid(i), state="completed", duration_us=1000 + i)
        assert writer.flush(30)
        ended = list(statements)
    finally:
        writer.close()
        event.remove(store.writing_engine, "before_cursor_execute", seen)

    # Of the exchanges' table: a statement per exchange made these 40 or more (each INSERT,
    # each UPDATE).
    assert len(begun) <= 3, begun
    assert len(ended) <= 3, ended
    with store.Session() as s:
        rows = s.execute(
            select(Exchange.uid, Exchange.host, Exchange.status, Exchange.state)
            .add_columns(Exchange.duration_us, Exchange.event_count, Exchange.response_headers)
            .order_by(Exchange.id)
        ).all()
    # Ids in the order the exchanges began; every field and count as written one by one.
    assert [tuple(r) for r in rows] == [
        (uid(i), f"h{i}", 200, "completed", 1000 + i, 6, [["content-type", "text/event-stream"]])
        for i in range(EXCHANGES)
    ]
