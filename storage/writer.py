"""Background writer: the only code that writes recorded traffic to the store.

The recording process calls it between batches from the proxy, so every public method only
puts a tuple on a ``queue.SimpleQueue`` (plus a counter update under a lock that never covers
I/O): parsing never waits for the database. A daemon thread drains the queue and commits one
transaction per batch: at most ``flush_interval`` old or ``max_batch`` rows.

Failure policy: callers never see an exception and are never blocked. Every row ends stored
or counted dropped (``storage.ledger``). A database that is down, locked, full, read-only or
silent past its deadline is retried with backoff, keeping what is queued up to
``max_pending`` rows (beyond that new rows are dropped and counted). A batch the database
rejects (bad values) is retried op by op and row by row, so a bad row costs only itself. An
SQLite file deleted or replaced under the writer is started afresh at its path, and what went
with the old file is counted. One log line per failure episode. An exchange that lost rows
says so: its ``error`` names how many and ``gap_seq`` the first one missing.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from ssetape.records import ChunkRow, EventRow
from ssetape.storage.batch import (
    BEGIN,
    CHUNKS_OP,
    EVENTS_OP,
    FINISH,
    FLUSH,
    ROWS,
    STOP,
    TABLES,
    UPDATE,
    Batch,
    BatchSql,
    Op,
)
from ssetape.storage.engine import StoreUnwritable, one_line
from ssetape.storage.ledger import Ledger, WriterStats
from ssetape.storage.partitions import DayPartitions
from ssetape.storage.store import Store
from ssetape.storage.store_file import StoreFile
from ssetape.storage.watchdog import Watchdog
from ssetape.vocabulary import ExchangeState

__all__ = ["Writer", "WriterStats"]

log = logging.getLogger("ssetape.storage")

_BACKOFF_FIRST, _BACKOFF_MAX = 0.05, 2.0
_REJECT_LOG_INTERVAL = 60.0
_CHECKPOINT_ROWS = 5_000
_TRANSIENT = frozenset(("OperationalError", "InterfaceError", "TimeoutError", "StoreUnwritable"))
_QUERY_CANCELED = "57014"  # SQLSTATE of a statement cut at statement_timeout


def _is_transient(exc: BaseException) -> bool:
    """Whether the same batch can succeed later (server down, locked, disk full).

    By PEP 249 class names, so raw driver errors (from COPY) count as well as
    SQLAlchemy's wrappers of them.
    """
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    return any(c.__name__ in _TRANSIENT for c in type(exc).__mro__)


def _sqlstate(exc: BaseException) -> str | None:
    state = getattr(exc.orig if isinstance(exc, DBAPIError) else exc, "sqlstate", None)
    return state if isinstance(state, str) else None


def _connection_lost(exc: BaseException) -> bool:
    """The connection itself went (closed by the server, cut): no SQLSTATE, the server
    never answered this statement."""
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    return _is_transient(exc) and _sqlstate(exc) is None


def _describe(exc: BaseException) -> str:
    return f"{type(exc.orig if isinstance(exc, DBAPIError) else exc).__name__}: {one_line(exc)}"


class Writer:
    """Queue-fed writer thread; see the module docstring for the failure policy."""

    def __init__(
        self,
        store: Store,
        *,
        flush_interval: float = 0.05,
        max_batch: int = 10_000,
        max_pending: int = 1_000_000,
        deadline: float | None = None,
        on_finished: Callable[[list[tuple[int, str]]], object] | None = None,
        on_commit: Callable[[Connection, int, int], object] | None = None,
    ) -> None:
        """``deadline``: seconds a statement may go unanswered before its connection is
        dropped (PostgreSQL; the store should be opened with the same deadline).
        ``on_commit``: see ``Ledger.in_commit`` (the run row's stored counts)."""
        self._store = store
        # Called in this thread with the (id, uid) of exchanges whose finish was
        # committed, before flush() waiters are released (the stream analysis).
        self._on_finished = on_finished
        self._finished: list[tuple[int, str]] = []
        self._engine = store.writing_engine  # never fails half-way on a lock upgrade
        self._sql = BatchSql(store.engine, is_sqlite=store.is_sqlite)
        self._days = DayPartitions(self._engine, is_sqlite=store.is_sqlite)
        self._interval = flush_interval
        self._max_batch = max_batch
        self.ledger = Ledger(max_pending, on_commit)
        self._q: queue.SimpleQueue[Op] = queue.SimpleQueue()
        # Set by flush() and close(): commit what is queued now, do not let the batch fill.
        self._hurry = threading.Event()
        self._file = StoreFile(store) if store.path is not None else None
        # A statement the server cannot answer in time fails there; one it never hears
        # (a silent network) is cut here, a little later.
        self._watchdog = (
            Watchdog(deadline + 1.0) if deadline is not None and not store.is_sqlite else None
        )
        # Writer-thread state.
        self._ids: dict[str, int] = {}  # uid -> exchanges.id until finished
        self._fields: dict[str, dict[str, Any]] = {}  # their committed fields, to begin again
        self._thread: threading.Thread | None = None
        self._deadline: float | None = None
        self._failing = 0  # failed attempts in the current outage
        # Whether the last outage saw a deadline cancel, and when it ended: the server may
        # close the cancelled session just after, failing a write after recovery (one cause).
        self._cancelled = False
        self._recovered_at = -_BACKOFF_MAX
        self._aftermath = (deadline + 1.0) if deadline is not None else 0.0
        self._unchecked = 0  # rows committed since the last idle checkpoint
        self._overflow_logged = False
        self._last_reject_log = -_REJECT_LOG_INTERVAL

    # -- public API: any thread, never blocks, never raises -------------------

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="ssetape-writer", daemon=True)
            self._thread.start()

    def begin(self, uid: str, **fields: object) -> None:
        self._put(BEGIN, uid, {"state": ExchangeState.RECORDING, **fields}, 1)

    def update(self, uid: str, **fields: object) -> None:
        self._put(UPDATE, uid, fields, 1)

    def add_events(self, uid: str, rows: list[EventRow]) -> None:
        if rows:
            self._put(EVENTS_OP, uid, rows, len(rows))

    def add_chunks(self, uid: str, rows: list[ChunkRow]) -> None:
        if rows:
            self._put(CHUNKS_OP, uid, rows, len(rows))

    def finish(self, uid: str, **fields: object) -> None:
        self._put(FINISH, uid, fields, 1)
        self.ledger.revive(uid)

    def hurry(self) -> None:
        """Commit what is queued now instead of letting the batch fill: the caller has
        handed over a whole batch of its own."""
        self._hurry.set()

    def flush(self, timeout: float = 5.0) -> bool:
        """Block until everything queued so far is committed; False on timeout.

        For tests and shutdown: it blocks, so never while batches are waiting.
        """
        if self._thread is None or not self._thread.is_alive():
            return self.ledger.idle()
        done = threading.Event()
        self._q.put((FLUSH, "", done))
        self._hurry.set()
        return done.wait(timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Commit what is queued (trying for at most ``timeout``), then stop the thread.
        Whatever is not committed by then is counted lost, even if the thread is stuck."""
        with self.ledger.lock:
            if self.ledger.closed:
                return
            self.ledger.closed = True
        self._deadline = time.monotonic() + timeout
        self._q.put((STOP, "", None))
        self._hurry.set()
        if self._thread is not None:
            self._thread.join(timeout + 1.0)
            if self._thread.is_alive():
                events, chunks = self.ledger.abandon()
                log.error(
                    f"ssetape storage: {self._store.url} did not answer within {timeout:g} s "
                    f"of stopping; {events} events and {chunks} chunks not stored"
                )
        if self._watchdog is not None:
            self._watchdog.close()

    @property
    def stats(self) -> WriterStats:
        return self.ledger.snapshot()

    def _put(self, kind: int, uid: str, payload: Any, cost: int) -> None:
        if self.ledger.admit(kind, uid, cost, payload):
            self._q.put((kind, uid, payload))  # SimpleQueue.put never blocks
            if kind == CHUNKS_OP:
                self.ledger.encoded(uid)

    # -- writer thread -------------------------------------------------------

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException:  # a bug must be visible, not a silently dead thread
            log.exception("ssetape storage: writer thread crashed; traffic is no longer stored")
            self.ledger.abandon()

    def _loop(self) -> None:
        ops: list[Op] = []
        idle_checkpoint = False
        behind = False  # the last batch was full: more is waiting
        while True:
            try:
                op = self._q.get(timeout=self._interval if idle_checkpoint else None)
            except queue.Empty:
                idle_checkpoint = False
                self._unchecked = 0
                self._checkpoint()
                continue
            if not behind and op[0] != FLUSH and op[0] != STOP:
                # Let the batch fill (the first op waits at most the interval): one wake-up
                # per batch. Taking each op as it comes cost a thread switch per op, more
                # than the op itself.
                self._hurry.wait(self._interval)
            self._hurry.clear()
            rows = 0
            while op[0] != STOP:
                ops.append(op)
                rows += len(op[2]) if op[0] in ROWS else 1
                if op[0] == FLUSH or rows >= self._max_batch:
                    break
                try:
                    op = self._q.get_nowait()
                except queue.Empty:
                    break
            behind = rows >= self._max_batch
            self._drain(ops)
            if op[0] == STOP or ops:  # ops left over: closing, deadline passed
                self._give_up(ops)
                return
            # Checkpointing after every small batch would cost two fsyncs each.
            idle_checkpoint = self._store.is_sqlite and self._unchecked >= _CHECKPOINT_ROWS

    def _checkpoint(self) -> None:
        """Copy the WAL into the database file while nothing is queued (SQLite)."""
        try:
            if self._file is not None:
                self._file.check_writable()
            with self._engine.connect() as conn:
                # PASSIVE never waits for readers or writers. On the raw
                # connection: through SQLAlchemy it would run inside a BEGIN.
                raw: Any = conn.connection.driver_connection
                raw.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except Exception as exc:  # only an optimisation: the next one may work
            log.debug("ssetape storage: idle checkpoint failed: %s", _describe(exc))

    def _drain(self, ops: list[Op]) -> None:
        """Commit ``ops`` as one batch, retrying failures, then release flush() waiters.

        Leaves ``ops`` non-empty only when closing and the deadline has passed.
        """
        batch = [op for op in ops if op[0] != FLUSH]
        flushes = [op[2] for op in ops if op[0] == FLUSH]
        ops.clear()
        delay = _BACKOFF_FIRST
        while batch:
            try:
                self._check_file()
                try:
                    self._commit(batch)
                    batch = []
                except Exception as exc:
                    if _is_transient(exc):
                        raise
                    self._note_failure(exc)
                    self._commit_one_by_one(batch)
            except Exception as exc:
                if not _is_transient(exc):
                    raise
                self._note_failure(exc, outage=True)
                if self._file is not None and not isinstance(exc, StoreUnwritable):
                    # A connection that opened the file read-only, or on a disk that went
                    # away, stays that way: the next attempt opens it again. (Not while the
                    # file is read-only: closing a connection writes to its mapped memory.)
                    self._file.refresh()
                if self._deadline is not None:
                    left = self._deadline - time.monotonic()
                    if left <= 0:
                        ops.extend(batch)
                        return
                    delay = min(delay, left)
                time.sleep(delay)
                delay = min(delay * 2, _BACKOFF_MAX)
            over, self.ledger.overflowing = self.ledger.overflowing, False
            if over and not self._overflow_logged:
                log.warning(
                    f"ssetape storage: more than {self.ledger.max_pending} rows waiting for "
                    f"{self._store.url}; dropping new events until it catches up"
                )
            self._overflow_logged = over
        if self._finished and self._on_finished is not None:
            finished, self._finished = self._finished, []
            try:
                if self._file is not None:
                    self._file.check_writable()
                self._on_finished(finished)
            except Exception as exc:  # derived data only: `ssetape reindex` can redo it
                log.warning(
                    f"ssetape storage: analysing {len(finished)} finished exchange(s) failed "
                    f"({_describe(exc)}); `ssetape reindex --stale` redoes it"
                )
        for done in flushes:
            done.set()

    def _commit_one_by_one(self, batch: list[Op]) -> None:
        """After the database rejected a batch: one transaction per op, and per row of a
        rejected op, so only the rejected rows are lost. Done work leaves ``batch`` at
        once, so a transient error raised from here makes the caller retry only the rest."""
        rejected: list[str] = []
        while batch:
            op = batch[0]
            try:
                self._commit([op], careful=True)
            except Exception as exc:
                if _is_transient(exc):
                    raise
                if op[0] in ROWS and len(op[2]) > 1:
                    rows = list(op[2])
                    while rows:  # row by row: one bad row never takes its neighbours down
                        one = (op[0], op[1], rows[:1])
                        try:
                            self._commit([one], careful=True)
                        except Exception as row_exc:
                            if _is_transient(row_exc):
                                batch[0] = (op[0], op[1], rows)
                                raise
                            rejected.append(_describe(row_exc))
                            self.ledger.dropped(one)
                        rows.pop(0)
                else:
                    rejected.append(_describe(exc))
                    self.ledger.dropped(op, dead=op[0] == BEGIN)
            batch.pop(0)
        now = time.monotonic()
        if rejected and now - self._last_reject_log >= _REJECT_LOG_INTERVAL:
            self._last_reject_log = now
            log.error(
                f"ssetape storage: {self._store.url} rejected {len(rejected)} write(s), dropped "
                f"(first: {rejected[0]}); see writer stats"
            )

    def _give_up(self, ops: list[Op]) -> None:
        """Closing: count what could not be committed in time."""
        with contextlib.suppress(queue.Empty):
            while True:
                ops.append(self._q.get_nowait())
        ops = [op for op in ops if op[0] != FLUSH and op[0] != STOP]
        for op in ops:
            self.ledger.dropped(op)
        lost = [sum(len(op[2]) for op in ops if op[0] == kind) for kind in TABLES]
        if any(lost) and not self.ledger.sealed:  # else close() counted and logged them
            log.warning(
                f"ssetape storage: closed while {self._store.url} was unavailable; "
                f"{lost[0]} events and {lost[1]} chunks were not stored"
            )
        with contextlib.suppress(Exception):  # what the last batches went into counts too
            self._check_file()

    def _note_failure(self, exc: BaseException, *, outage: bool = False) -> None:
        """Count every failure; announce an outage once per episode (first failure to next
        commit; a lost connection just after one with a deadline cancel belongs to it)."""
        msg = _describe(exc)
        self.ledger.failed(msg)
        if not outage:
            return
        aftermath = (
            not self._failing
            and self._cancelled
            and _connection_lost(exc)
            and time.monotonic() - self._recovered_at <= self._aftermath
        )
        if not self._failing and not aftermath:
            self._cancelled = False
            log.warning(
                f"ssetape storage: cannot write to {self._store.url} ({msg}); traffic still "
                f"flows, retrying with backoff and keeping up to {self.ledger.max_pending} "
                "queued rows"
            )
        self._cancelled = self._cancelled or _sqlstate(exc) == _QUERY_CANCELED
        self._failing += 1

    def _check_file(self) -> None:
        if self._file is not None:
            self._file.follow(self.ledger, self._ids, self._fields, self._engine, self._sql)

    def _commit(self, ops: list[Op], *, careful: bool = False) -> None:
        """Apply ``ops`` in one transaction (see Batch), then update ids and counters."""
        ops = [self.ledger.annotated(op) if op[0] == FINISH else op for op in ops]
        batch = Batch(ops, self._ids)
        self._days.ahead()
        guard, then = self._watchdog.watching if self._watchdog else None, self.ledger.in_commit
        batch.apply(self._engine, self._sql, careful=careful, guard=guard, then=then)
        known, ids, finished, dropped = self._ids, batch.ids, batch.finished, batch.dropped
        rows = batch.rows
        # Committed: only now may the id map and the counters change.
        known.update(ids)
        if self._file is not None:  # only a file that can vanish needs them to begin again
            for kind, uid, payload in ops:
                if kind in (BEGIN, UPDATE) and uid in known:
                    self._fields.setdefault(uid, {}).update(payload)
        for uid in finished:
            xid = known.pop(uid, None)
            self._fields.pop(uid, None)
            if xid is not None:
                self._finished.append((xid, uid))
        for op in dropped:
            self.ledger.dropped(op)
        begins = sum(1 for op in ops if op[0] == BEGIN)
        events, chunks = len(rows[EVENTS_OP]), len(rows[CHUNKS_OP])
        self.ledger.committed(events, chunks, batch.exchange_ops, begins, batch.new)
        self._unchecked += events + chunks
        if self._failing:
            log.warning(
                f"ssetape storage: writing to {self._store.url} again after {self._failing} "
                f"failed attempts ({self.stats.dropped_events} events dropped so far)"
            )
            self._failing = 0
            self._recovered_at = time.monotonic()
