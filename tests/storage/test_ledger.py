"""The writer's books: each operation is settled once, stored or lost."""

from __future__ import annotations

from ssetape.storage.batch import BEGIN, EVENTS_OP
from ssetape.storage.ledger import Ledger

ROWS = [(seq, 0, None, "x", None, b"data: x\n\n") for seq in range(5)]


def books(ledger: Ledger) -> tuple[int, int, int, int]:
    st = ledger.snapshot()
    return st.events, st.dropped_events, st.exchanges, st.dropped_exchanges


def test_what_close_abandoned_is_not_counted_again_when_the_writer_gives_up_later() -> None:
    ledger = Ledger(100)
    assert ledger.admit(BEGIN, "a", 1) and ledger.admit(EVENTS_OP, "a", 5, ROWS)
    assert ledger.abandon() == (5, 0)  # close() could not wait for the stuck writer
    ledger.dropped((EVENTS_OP, "a", ROWS))  # ...which then gives up on the same ops
    ledger.dropped((BEGIN, "a", {}))
    assert books(ledger) == (0, 5, 0, 1)


def test_what_close_abandoned_and_was_stored_after_all_counts_as_stored() -> None:
    ledger = Ledger(100)
    assert ledger.admit(BEGIN, "a", 1) and ledger.admit(EVENTS_OP, "a", 5, ROWS)
    ledger.abandon()
    ledger.committed(5, 0, exchange_ops=1, begins=1, new=1)  # its last commit went through
    assert books(ledger) == (5, 0, 1, 0)
