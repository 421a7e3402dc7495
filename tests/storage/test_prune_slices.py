"""`ssetape prune` bounds every transaction, also for one exchange of more rows than a batch
(a 10M-event stream in one transaction would hold SQLite's write lock past the writers' busy
timeout): its events and chunks go in slices of `batch_rows`, a transaction each, the counts
stay the rows removed, and a prune stopped half-way through it is resumed by the next run
(SQLite and PostgreSQL)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event, select

from ssetape.storage.models import Event, Exchange, Setting
from ssetape.storage.prune import Pruner, PruneReport
from ssetape.storage.store import Store
from tests.storage.conftest import store, store_url
from tests.storage.test_prune import CUT, NOW, OLD, Feed, Stop, counts, minus, of

__all__ = ["store", "store_url"]  # fixtures

BIG = 1_000  # events of the big exchange (and 2 more: usage, [DONE])
SLICE = 100


@pytest.fixture
def tape(store: Store) -> Iterator[dict[str, Any]]:
    feed = Feed(store, analyse=False)
    try:
        small = [feed.exchange(OLD + dt.timedelta(seconds=i), 3) for i in range(5)]
        big = feed.exchange(OLD + dt.timedelta(seconds=2, milliseconds=1), BIG, chunks=250)
        new = feed.exchange(NOW, 3)
        flying = feed.begin(OLD)
        feed.events(flying, [(0, 0, None, "x", None, b"data: x\n\n")])
        feed.settle()
        yield {"small": small, "big": big, "new": new, "flying": flying}
    finally:
        feed.writer.close()


class Statements:
    """What each transaction on the store deleted from events and chunks (an SQLAlchemy event
    listener on its engine: the statements as the database ran them)."""

    def __init__(self, store: Store) -> None:
        self.engine = store.engine
        self.open: int = 0
        self.transactions: list[int] = []  # rows deleted from events and chunks, per commit
        event.listen(self.engine, "after_cursor_execute", self._executed)
        event.listen(self.engine, "commit", self._committed)

    def _executed(self, conn: Any, cursor: Any, sql: str, *args: Any) -> None:
        if sql.lstrip().upper().startswith(("DELETE FROM EVENTS", "DELETE FROM CHUNKS")):
            self.open += max(cursor.rowcount, 0)

    def _committed(self, conn: Any) -> None:
        if self.open:
            self.transactions.append(self.open)
        self.open = 0

    def close(self) -> None:
        event.remove(self.engine, "after_cursor_execute", self._executed)
        event.remove(self.engine, "commit", self._committed)


def _big(store: Store, uid: str) -> tuple[dt.datetime | None, int] | None:
    with store.Session() as s:
        x = s.scalar(select(Exchange).where(Exchange.uid == uid))
        if x is None:
            return None
        left = len(s.scalars(select(Event.seq).where(Event.exchange_id == x.id)).all())
        return x.events_pruned_at, left


def _rows(report: dict[str, int], events_only: bool) -> dict[str, int]:
    """The rows a prune removed: events-only counts the exchanges it emptied, which stay."""
    return {k: v for k, v in report.items() if not (events_only and k == "exchanges")}


def _notes(store: Store) -> list[str]:
    with store.Session() as s:
        return list(s.scalars(select(Setting.key).where(Setting.key.startswith("prune_"))))


@pytest.mark.parametrize("events_only", [False, True], ids=["whole", "events-only"])
def test_an_exchange_past_a_batch_goes_in_slices_and_the_counts_are_the_rows_removed(
    store: Store, tape: dict[str, Any], events_only: bool
) -> None:
    before = counts(store)
    expected = Pruner(store).prune(CUT, events_only=events_only, dry_run=True)
    watch = Statements(store)
    try:
        report = Pruner(store, batch_rows=SLICE).prune(CUT, events_only=events_only)
    finally:
        watch.close()
    assert of(report) == of(expected)
    assert _rows(minus(before, counts(store)), events_only) == _rows(of(report), events_only)
    assert report.events == 5 * 5 + BIG + 2 and report.chunks == 250 and report.in_flight == 1
    assert max(watch.transactions) <= SLICE, watch.transactions
    # 1,002 events and 250 chunks: at least 13 transactions of at most 100 rows.
    assert len(watch.transactions) >= 13 and sum(watch.transactions) == BIG + 2 + 250 + 25
    assert report.batches == len(watch.transactions) + 1  # and the one that ends the big one
    gone = _big(store, tape["big"])
    assert gone is None if not events_only else gone is not None and gone[1] == 0
    assert counts(store, Exchange.uid.in_([tape["new"], tape["flying"]]))["exchanges"] == 2
    assert _notes(store) == []


@pytest.mark.parametrize("events_only", [False, True], ids=["whole", "events-only"])
def test_a_prune_stopped_inside_a_big_exchange_marks_it_and_the_next_run_finishes_it(
    store: Store, tape: dict[str, Any], events_only: bool
) -> None:
    before = counts(store)
    expected = Pruner(store).prune(CUT, events_only=events_only, dry_run=True)
    seen: list[PruneReport] = []

    def stop(r: PruneReport) -> None:
        seen.append(dataclasses.replace(r))
        if len(seen) == 3:  # Ctrl-C two slices into the big exchange
            raise Stop

    with pytest.raises(Stop):
        Pruner(store, batch_rows=SLICE).prune(CUT, events_only=events_only, on_batch=stop)
    first = seen[-1]
    left = _rows(minus(before, counts(store)), events_only)
    assert left == _rows(of(first), events_only), "the reported slices are not what left"
    half = _big(store, tape["big"])
    # Marked at its first slice: replay no longer serves what is left of it.
    assert half is not None and half[0] is not None and 0 < half[1] < BIG
    assert _notes(store) != []
    dry = Pruner(store).prune(CUT, events_only=events_only, dry_run=True)
    assert {k: of(first)[k] + of(dry)[k] for k in of(first)} == of(expected)

    rest = Pruner(store, batch_rows=SLICE).prune(CUT, events_only=events_only)
    assert {k: of(first)[k] + of(rest)[k] for k in of(first)} == of(expected)
    assert _rows(minus(before, counts(store)), events_only) == _rows(of(expected), events_only)
    done = _big(store, tape["big"])
    assert done is None if not events_only else done is not None and done[1] == 0
    assert _notes(store) == []
