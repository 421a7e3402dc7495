"""The recording process's books: what it stored, lost and dropped, and nowhere else.

Every row the recording process hands over ends in exactly one of two columns, stored or
dropped (with the reason logged by the writer), so that "stored + lost = relayed" holds in
the exit line, the run row and ``ssetape stats`` whatever the store did. The events that never
became rows are entered here too: those the proxy lost and told of, those of exchanges this
process never saw begin, and those over ``ssetape_max_event``. Its stats are the run row
(``WriterStats.run_counts``), whose stored counts each commit writes itself
(:meth:`Ledger.in_commit`). Any thread may ask; one lock guards the books, never during I/O.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection

from ssetape.storage.batch import BEGIN, CHUNKS_OP, EVENTS_OP, FINISH, ROWS, UPDATE, Batch, Op
from ssetape.storage.runs import RunCounts

__all__ = ["Ledger", "WriterStats"]


@dataclasses.dataclass
class WriterStats:
    exchanges: int = 0  # exchange rows in the store
    events: int = 0  # event rows committed (and still in the store)
    chunks: int = 0  # chunk rows committed
    batches: int = 0  # transactions committed
    failed_batches: int = 0  # transactions that failed (each retry counts)
    dropped_events: int = 0  # never stored, or gone with a deleted store file
    dropped_chunks: int = 0
    dropped_exchanges: int = 0  # begun but never stored (their rows are dropped too)
    last_error: str | None = None
    # Never rows: lost by the proxy (and told), or relayed and not stored here.
    told_exchanges: int = 0
    told_events: int = 0
    unstored_events: int = 0  # of exchanges never seen begin, or over ssetape_max_event
    capture_failures: int = 0  # streams that could not be parsed
    exchanges_finished: int = 0  # whose finish is committed

    def run_counts(self) -> RunCounts:
        """What the run row says: every event and exchange stored, or lost once."""
        return RunCounts(
            exchanges_recorded=self.exchanges,
            events_recorded=self.events,
            exchanges_lost=self.told_exchanges + self.dropped_exchanges,
            events_lost=self.told_events + self.dropped_events + self.unstored_events,
            store_errors=self.failed_batches,
            last_error=self.last_error,
        )


def cost(op: Op) -> int:
    return len(op[2]) if op[0] in ROWS else 1


class Ledger:
    def __init__(
        self, max_pending: int, on_commit: Callable[[Connection, int, int], object] | None = None
    ) -> None:
        self.lock = threading.Lock()
        self._on_commit = on_commit
        self.stats = WriterStats()
        self.max_pending = max_pending
        self.closed = False
        # abandon() counted every op still outstanding as lost, at once: from then on the
        # writer's late news of those ops (dropped, or committed after all) must not count
        # them again, so each op is settled exactly once.
        self.sealed = False
        self.overflowing = False  # rows were refused since the writer last looked
        self._pending = 0  # rows (and exchange ops) taken in, not yet committed or dropped
        self._waiting = {EVENTS_OP: 0, CHUNKS_OP: 0, BEGIN: 0}  # the same, by kind
        self._dead: set[str] = set()  # uids whose exchange row will never exist
        # (uid, row kind) -> [first seq not stored, rows not stored], and what else its
        # finish must say: what each exchange misses. Replay sends an encoded exchange's wire
        # chunks, a plain one's events: its gap is in the rows it sends.
        self._gaps: dict[tuple[str, int], list[int]] = {}
        self._notes: dict[str, str] = {}
        self._encoded: set[str] = set()
        # Committed into the store file as it is now (a deleted file takes them along).
        self.generation = {EVENTS_OP: 0, CHUNKS_OP: 0, BEGIN: 0}

    def admit(self, kind: int, uid: str, n: int, payload: Any = None) -> bool:
        """Take an op in, or count it dropped (closed, its exchange dead, or over the bound)."""
        with self.lock:
            if not self.closed and uid not in self._dead:
                # Updates and finishes of a live exchange are never capped: they are few,
                # and a lost finish would leave it "recording" forever.
                if self._pending + n <= self.max_pending or kind in (UPDATE, FINISH):
                    self._pending += n
                    if kind in self._waiting:
                        self._waiting[kind] += n
                    return True
                self.overflowing = True
                if kind == BEGIN:
                    self._dead.add(uid)
            self._count_dropped(kind, n)
            if kind in ROWS:
                self._gap(kind, uid, payload)
            return False

    def revive(self, uid: str) -> None:
        """Its finish arrived: whatever comes for this uid next is a new exchange."""
        with self.lock:
            if uid in self._dead:  # never stored: nothing will say what it misses
                self._dead.discard(uid)
                self._forget(uid)

    def dropped(self, op: Op, *, dead: bool = False) -> None:
        """An op taken in will never be stored."""
        n = cost(op)
        with self.lock:
            if not self.sealed:
                self._count_dropped(op[0], n)
                self._settle(op[0], n)
            if op[0] in ROWS:
                self._gap(op[0], op[1], op[2])
            if op[0] == FINISH:
                self._dead.discard(op[1])
            elif dead:
                self._dead.add(op[1])

    def committed(self, events: int, chunks: int, exchange_ops: int, begins: int, new: int) -> None:
        """A transaction committed ``exchange_ops`` ops (``begins`` of them begins) that
        inserted ``new`` exchange rows, and those rows."""
        with self.lock:
            if self.sealed:  # counted lost by abandon(), stored after all: moved across
                self.stats.dropped_events -= events
                self.stats.dropped_chunks -= chunks
                self.stats.dropped_exchanges -= begins
            else:
                self._settle(EVENTS_OP, events)
                self._settle(CHUNKS_OP, chunks)
                self._pending -= exchange_ops
                self._waiting[BEGIN] -= begins
            self.stats.batches += 1
            self.stats.exchanges += new
            self.stats.events += events
            self.stats.chunks += chunks
            self.generation[EVENTS_OP] += events
            self.generation[CHUNKS_OP] += chunks
            self.generation[BEGIN] += new

    def in_commit(self, conn: Connection, batch: Batch) -> None:
        """In ``batch``'s transaction, last: tell ``on_commit`` the (exchanges, events)
        stored in all once it commits (only the writer's thread changes those). A run row
        written so is exact whatever the process dies of, and a retry writes it the same."""
        if self._on_commit is not None:
            events = self.stats.events + len(batch.rows[EVENTS_OP])
            self._on_commit(conn, self.stats.exchanges + batch.new, events)

    def told(self, exchanges: int, events: int) -> None:
        """The proxy lost these and said so: they never reach the writer."""
        with self.lock:
            self.stats.told_exchanges += exchanges
            self.stats.told_events += events

    def not_stored(self, events: int, *, failed_capture: bool = False) -> None:
        """Relayed events this process will not store (a stream it could not parse counts)."""
        with self.lock:
            self.stats.unstored_events += events
            self.stats.capture_failures += failed_capture

    def finished(self, exchanges: int) -> None:
        with self.lock:
            self.stats.exchanges_finished += exchanges

    def failed(self, message: str) -> None:
        with self.lock:
            self.stats.failed_batches += 1
            self.stats.last_error = message

    def file_lost(self) -> tuple[int, int]:
        """The store file was deleted or replaced: what was committed into it is gone.
        (events, exchanges) lost; the open ones among those may come back (reopened)."""
        with self.lock:
            gen, self.generation = self.generation, dict.fromkeys(self.generation, 0)
            self.stats.events -= gen[EVENTS_OP]
            self.stats.chunks -= gen[CHUNKS_OP]
            self.stats.exchanges -= gen[BEGIN]
            self.stats.dropped_events += gen[EVENTS_OP]
            self.stats.dropped_chunks += gen[CHUNKS_OP]
            self.stats.dropped_exchanges += gen[BEGIN]
            return gen[EVENTS_OP], gen[BEGIN]

    def reopened(self, n: int) -> None:
        """``n`` open exchanges lost with a store file were begun again in a new one."""
        with self.lock:
            self.stats.exchanges += n
            self.stats.dropped_exchanges -= n
            self.generation[BEGIN] += n

    def abandon(self) -> tuple[int, int]:
        """Closing while the writer is stuck in the store: everything taken in and not
        committed is lost. (events, chunks) lost."""
        with self.lock:
            self.closed = self.sealed = True
            events, chunks = self._waiting[EVENTS_OP], self._waiting[CHUNKS_OP]
            self.stats.dropped_events += events
            self.stats.dropped_chunks += chunks
            self.stats.dropped_exchanges += self._waiting[BEGIN]
            self._waiting = dict.fromkeys(self._waiting, 0)
            self._pending = 0
            return events, chunks

    def encoded(self, uid: str) -> None:
        """``uid`` streams wire chunks: replay sends those, so its gap is theirs."""
        with self.lock:
            self._encoded.add(uid)

    def lost_before(self, uid: str, note: str) -> None:
        """Everything ``uid`` streamed so far is gone (and ``note`` says why)."""
        with self.lock:
            for kind in ROWS:
                self._gaps.setdefault((uid, kind), [0, 0])[0] = 0
            self._notes[uid] = note

    def annotated(self, op: Op) -> Op:
        """A finish that says what of its exchange was not stored (``error``, ``gap_seq``)."""
        uid, fields = op[1], op[2]
        with self.lock:
            events, chunks = self._gaps.get((uid, EVENTS_OP)), self._gaps.get((uid, CHUNKS_OP))
            note = self._notes.get(uid)
            encoded = uid in self._encoded
            self._forget(uid)
        if events is None and chunks is None and note is None:
            return op
        notes = [fields.get("error"), note]
        for gap, what in ((events, "events"), (chunks, "wire chunks")):
            if gap is not None and gap[1]:
                notes.append(f"{gap[1]} {what} not stored: the store was unavailable")
        gap = chunks if encoded else events
        known = fields.get("gap_seq")
        gap_seq = known if gap is None else gap[0] if known is None else min(known, gap[0])
        error = "; ".join(n for n in notes if n) or None
        return (FINISH, uid, {**fields, "gap_seq": gap_seq, "error": error})

    def idle(self) -> bool:
        with self.lock:
            return self._pending == 0

    @property
    def pending(self) -> int:
        """Rows (and exchange ops) taken in, not yet committed or dropped: the queue."""
        return self._pending

    def snapshot(self) -> WriterStats:
        with self.lock:
            return dataclasses.replace(self.stats)

    def _settle(self, kind: int, n: int) -> None:  # with the lock held
        self._pending -= n
        if kind in self._waiting:
            self._waiting[kind] -= n

    def _forget(self, uid: str) -> None:  # with the lock held
        for kind in ROWS:
            self._gaps.pop((uid, kind), None)
        self._notes.pop(uid, None)
        self._encoded.discard(uid)

    def _gap(self, kind: int, uid: str, rows: list[Any]) -> None:  # with the lock held
        if kind == CHUNKS_OP:
            self._encoded.add(uid)
        first = min(r[0] for r in rows)
        gap = self._gaps.setdefault((uid, kind), [first, 0])
        gap[0], gap[1] = min(gap[0], first), gap[1] + len(rows)

    def _count_dropped(self, kind: int, n: int) -> None:  # with the lock held
        if kind == EVENTS_OP:
            self.stats.dropped_events += n
        elif kind == CHUNKS_OP:
            self.stats.dropped_chunks += n
        elif kind == BEGIN:
            self.stats.dropped_exchanges += n
