"""Background writer: the only code that writes recorded traffic to the store.

The recorder calls it from mitmproxy's event loop, so every public method only
puts a tuple on a ``queue.SimpleQueue`` (plus a counter update under a lock
that never covers I/O). A daemon thread drains the queue and commits one
transaction per batch: at most ``flush_interval`` old or ``max_batch`` rows.

Failure policy: callers never see an exception and are never blocked. A
database that is down, locked or full is retried with backoff, keeping what is
queued up to ``max_pending`` rows (beyond that new rows are dropped and
counted). A batch the database rejects (bad values, duplicates) is retried op
by op, so a bad op costs only itself. One log line per failure episode.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import queue
import threading
import time
from operator import itemgetter
from typing import Any, cast

from sqlalchemy import Connection, Table, func, insert, select, update
from sqlalchemy.exc import DBAPIError
from ssetape.storage.models import Event, Exchange
from ssetape.storage.store import SQLITE_BEGIN, Store, one_line

log = logging.getLogger("ssetape.storage")

_EXCHANGES = cast(Table, Exchange.__table__)
_EVENTS = cast(Table, Event.__table__)
_INSERT_EXCHANGE = insert(_EXCHANGES).returning(_EXCHANGES.c.id)
_COLUMNS = frozenset(_EXCHANGES.c.keys()) - {"id", "uid", "event_count"}

# Operation kinds; an op is (kind, uid, payload). Plain tuples: they are
# created on the proxy's event loop for every chunk, so they must be cheap.
_BEGIN, _UPDATE, _EVENTS_OP, _CHUNKS_OP, _FINISH, _FLUSH, _STOP = range(7)
_Op = tuple[int, str, Any]
_ROWS = frozenset((_EVENTS_OP, _CHUNKS_OP))
# Table and row layout per row kind (exchange_id goes first in every row tuple).
_TABLES = {
    _EVENTS_OP: ("events", ("seq", "offset_us", "event", "data", "sse_id", "raw")),
    _CHUNKS_OP: ("chunks", ("seq", "offset_us", "data")),
}
_GETTERS = {kind: itemgetter(*keys) for kind, (_, keys) in _TABLES.items()}
_BACKOFF_FIRST, _BACKOFF_MAX = 0.05, 2.0
_REJECT_LOG_INTERVAL = 60.0
_CHECKPOINT_ROWS = 5_000
_TRANSIENT = frozenset(("OperationalError", "InterfaceError", "TimeoutError"))


@dataclasses.dataclass
class WriterStats:
    exchanges: int = 0  # exchange rows inserted
    events: int = 0  # event rows committed
    chunks: int = 0  # chunk rows committed
    batches: int = 0  # transactions committed
    failed_batches: int = 0  # transactions that failed (each retry counts)
    dropped_events: int = 0  # never stored: queue full, rejected, exchange unknown, closed
    dropped_chunks: int = 0
    last_error: str | None = None


def _cost(op: _Op) -> int:
    return len(op[2]) if op[0] in _ROWS else 1


def _is_transient(exc: BaseException) -> bool:
    """Whether the same batch can succeed later (server down, locked, disk full).

    By PEP 249 class names, so raw driver errors (from COPY) count as well as
    SQLAlchemy's wrappers of them.
    """
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    return any(c.__name__ in _TRANSIENT for c in type(exc).__mro__)


def _describe(exc: BaseException) -> str:
    return f"{type(exc.orig if isinstance(exc, DBAPIError) else exc).__name__}: {one_line(exc)}"


def _fields(payload: dict[str, Any]) -> dict[str, Any]:
    unknown = set(payload) - _COLUMNS
    if unknown:  # names only: values may be traffic contents
        raise ValueError(f"unknown or read-only Exchange field(s): {', '.join(sorted(unknown))}")
    return payload


class Writer:
    """Queue-fed writer thread; see the module docstring for the failure policy."""

    def __init__(
        self,
        store: Store,
        *,
        flush_interval: float = 0.05,
        max_batch: int = 10_000,
        max_pending: int = 1_000_000,
    ) -> None:
        self._store = store
        # IMMEDIATE: take SQLite's write lock at BEGIN (waiting busy_timeout),
        # never fail half-way through a batch on a lock upgrade.
        self._engine = (
            store.engine.execution_options(**{SQLITE_BEGIN: "IMMEDIATE"})
            if store.is_sqlite
            else store.engine
        )
        # Events and chunks skip SQLAlchemy's per-row parameter processing (most
        # of the time at 100k rows/s): DBAPI executemany of tuples, same
        # transaction. Their columns need no type conversion.
        mark = "?" if store.engine.dialect.paramstyle == "qmark" else "%s"
        self._sql = {
            kind: f"INSERT INTO {table} (exchange_id, {', '.join(keys)}) "
            f"VALUES ({', '.join([mark] * (len(keys) + 1))})"
            for kind, (table, keys) in _TABLES.items()
        }
        self._sql_count = (
            f"UPDATE exchanges SET event_count = event_count + {mark} WHERE id = {mark}"
        )
        self._interval = flush_interval
        self._max_batch = max_batch
        self._max_pending = max_pending
        self._q: queue.SimpleQueue[_Op] = queue.SimpleQueue()
        self._lock = threading.Lock()  # guards the fields below; never held during I/O
        self._stats = WriterStats()
        self._pending = 0  # rows (and exchange ops) accepted, not yet committed or dropped
        self._dead: set[str] = set()  # uids whose exchange row will never exist
        self._closed = False
        self._overflowing = False
        # Writer-thread state.
        self._ids: dict[str, int] = {}  # uid -> exchanges.id until finished
        self._thread: threading.Thread | None = None
        self._deadline: float | None = None
        self._failing = 0  # failed attempts in the current outage
        self._unchecked = 0  # rows committed since the last idle checkpoint
        self._overflow_logged = False
        self._last_reject_log = -_REJECT_LOG_INTERVAL

    # -- public API: any thread, never blocks, never raises -------------------

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="ssetape-writer", daemon=True)
            self._thread.start()

    def begin(self, uid: str, **fields: object) -> None:
        self._put(_BEGIN, uid, {"state": "recording", **fields}, 1)

    def update(self, uid: str, **fields: object) -> None:
        self._put(_UPDATE, uid, fields, 1)

    def add_events(self, uid: str, rows: list[dict[str, object]]) -> None:
        if rows:
            self._put(_EVENTS_OP, uid, rows, len(rows))

    def add_chunks(self, uid: str, rows: list[dict[str, object]]) -> None:
        if rows:
            self._put(_CHUNKS_OP, uid, rows, len(rows))

    def finish(self, uid: str, **fields: object) -> None:
        self._put(_FINISH, uid, fields, 1)
        with self._lock:
            self._dead.discard(uid)

    def flush(self, timeout: float = 5.0) -> bool:
        """Block until everything queued so far is committed; False on timeout.

        For tests and shutdown: never call it on the proxy's event loop.
        """
        if self._thread is None or not self._thread.is_alive():
            with self._lock:
                return self._pending == 0
        done = threading.Event()
        self._q.put((_FLUSH, "", done))
        return done.wait(timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Commit what is queued (trying for at most ``timeout``), then stop the thread."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._deadline = time.monotonic() + timeout
        self._q.put((_STOP, "", None))
        if self._thread is not None:
            self._thread.join(timeout + 1.0)

    @property
    def stats(self) -> WriterStats:
        with self._lock:
            return dataclasses.replace(self._stats)

    def _put(self, kind: int, uid: str, payload: Any, cost: int) -> None:
        with self._lock:
            if not self._closed and uid not in self._dead:
                # Updates and finishes of a live exchange are never capped: they
                # are few, and a lost finish would leave it "recording" forever.
                if self._pending + cost <= self._max_pending or kind in (_UPDATE, _FINISH):
                    self._pending += cost
                    self._q.put((kind, uid, payload))  # SimpleQueue.put never blocks
                    return
                self._overflowing = True
                if kind == _BEGIN:
                    self._dead.add(uid)
            self._count_dropped(kind, cost)

    def _count_dropped(self, kind: int, n: int) -> None:  # with self._lock held
        if kind == _EVENTS_OP:
            self._stats.dropped_events += n
        elif kind == _CHUNKS_OP:
            self._stats.dropped_chunks += n

    def _drop(self, op: _Op, *, dead: bool = False) -> None:
        with self._lock:
            self._count_dropped(op[0], _cost(op))
            self._pending -= _cost(op)
            if op[0] == _FINISH:
                self._dead.discard(op[1])
            elif dead:
                self._dead.add(op[1])

    # -- writer thread -------------------------------------------------------

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException:  # a bug must be visible, not a silently dead thread
            log.exception("ssetape storage: writer thread crashed; traffic is no longer stored")
            with self._lock:
                self._closed = True

    def _loop(self) -> None:
        ops: list[_Op] = []
        idle_checkpoint = False
        while True:
            try:
                op = self._q.get(timeout=self._interval if idle_checkpoint else None)
            except queue.Empty:
                idle_checkpoint = False
                self._unchecked = 0
                self._checkpoint()
                continue
            due = time.monotonic() + self._interval  # the first op waits at most this
            rows = 0
            while op[0] != _STOP:
                ops.append(op)
                rows += len(op[2]) if op[0] in _ROWS else 1
                if op[0] == _FLUSH or rows >= self._max_batch or time.monotonic() >= due:
                    break
                try:
                    op = self._q.get_nowait()  # cheap path while the queue is busy
                except queue.Empty:
                    try:
                        op = self._q.get(timeout=max(0.0, due - time.monotonic()))
                    except queue.Empty:
                        break
            self._drain(ops)
            if op[0] == _STOP or ops:  # ops left over: closing, deadline passed
                self._give_up(ops)
                return
            # Checkpointing after every small batch would cost two fsyncs each.
            idle_checkpoint = self._store.is_sqlite and self._unchecked >= _CHECKPOINT_ROWS

    def _checkpoint(self) -> None:
        """Copy the WAL into the database file while nothing is queued (SQLite)."""
        try:
            with self._engine.connect() as conn:
                # PASSIVE never waits for readers or writers. On the raw
                # connection: through SQLAlchemy it would run inside a BEGIN.
                raw: Any = conn.connection.driver_connection
                raw.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except Exception as exc:  # only an optimisation: the next one may work
            log.debug("ssetape storage: idle checkpoint failed: %s", _describe(exc))

    def _drain(self, ops: list[_Op]) -> None:
        """Commit ``ops`` as one batch, retrying failures, then release flush() waiters.

        Leaves ``ops`` non-empty only when closing and the deadline has passed.
        """
        batch = [op for op in ops if op[0] != _FLUSH]
        flushes = [op[2] for op in ops if op[0] == _FLUSH]
        ops.clear()
        delay = _BACKOFF_FIRST
        while batch:
            try:
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
                if self._deadline is not None:
                    left = self._deadline - time.monotonic()
                    if left <= 0:
                        ops.extend(batch)
                        return
                    delay = min(delay, left)
                time.sleep(delay)
                delay = min(delay * 2, _BACKOFF_MAX)
            with self._lock:
                over, self._overflowing = self._overflowing, False
            if over and not self._overflow_logged:
                log.warning(
                    f"ssetape storage: more than {self._max_pending} rows waiting for "
                    f"{self._store.url}; dropping new events until it catches up"
                )
            self._overflow_logged = over
        for done in flushes:
            done.set()

    def _commit_one_by_one(self, batch: list[_Op]) -> None:
        """After the database rejected a batch: one transaction per op, so only the
        rejected ops are lost. Done ops leave ``batch`` at once, so a transient
        error raised from here makes the caller retry only the rest."""
        rejected: list[str] = []
        while batch:
            op = batch[0]
            try:
                self._commit([op], careful=True)
            except Exception as exc:
                if _is_transient(exc):
                    raise
                rejected.append(_describe(exc))
                self._drop(op, dead=op[0] == _BEGIN)
            batch.pop(0)
        now = time.monotonic()
        if rejected and now - self._last_reject_log >= _REJECT_LOG_INTERVAL:
            self._last_reject_log = now
            log.error(
                f"ssetape storage: {self._store.url} rejected {len(rejected)} write(s), dropped "
                f"(first: {rejected[0]}); see writer stats"
            )

    def _give_up(self, ops: list[_Op]) -> None:
        """Closing: count what could not be committed in time."""
        with contextlib.suppress(queue.Empty):
            while True:
                ops.append(self._q.get_nowait())
        ops = [op for op in ops if op[0] != _FLUSH and op[0] != _STOP]
        for op in ops:
            self._drop(op)
        lost = [sum(len(op[2]) for op in ops if op[0] == kind) for kind in _TABLES]
        if any(lost):
            log.warning(
                f"ssetape storage: closed while {self._store.url} was unavailable; "
                f"{lost[0]} events and {lost[1]} chunks were not stored"
            )

    def _note_failure(self, exc: BaseException, *, outage: bool = False) -> None:
        msg = _describe(exc)
        with self._lock:
            self._stats.failed_batches += 1
            self._stats.last_error = msg
        if outage and not self._failing:
            log.warning(
                f"ssetape storage: cannot write to {self._store.url} ({msg}); traffic still "
                f"flows, retrying with backoff and keeping up to {self._max_pending} queued rows"
            )
        self._failing += outage

    def _commit(self, batch: list[_Op], *, careful: bool = False) -> None:
        """Apply ``batch`` in one transaction: one INSERT per new exchange, one
        executemany (PostgreSQL: COPY) per row kind, and one UPDATE per
        touched exchange (merged fields plus the event_count increment).

        ``careful`` makes it safe to repeat after a commit whose outcome was
        unknown (connection lost during COMMIT): duplicate rows are skipped and
        event_count is recounted instead of incremented.
        """
        known = self._ids
        begins: dict[str, dict[str, Any]] = {}
        updates: dict[str, dict[str, Any]] = {}
        row_ops: dict[tuple[int, str], list[dict[str, Any]]] = {}  # rows by (kind, uid)
        finished: list[str] = []
        exchange_ops = 0
        for kind, uid, payload in batch:
            if kind in _ROWS:  # the hot loop: one dict lookup and a C-level extend
                bucket = row_ops.get((kind, uid))
                if bucket is None:
                    row_ops[kind, uid] = bucket = []
                bucket += payload
                continue
            exchange_ops += 1
            if kind == _BEGIN and uid not in known and uid not in begins:
                begins[uid] = dict(_fields(payload))
            else:  # update, finish, or a repeated begin (an update too)
                target = begins[uid] if uid in begins else updates.setdefault(uid, {})
                target.update(_fields(payload))
                if kind == _FINISH:
                    finished.append(uid)
        counts = {uid: len(rs) for (kind, uid), rs in row_ops.items() if kind == _EVENTS_OP}
        ids: dict[str, int] = {}
        dropped: list[_Op] = []
        rows: dict[int, list[tuple[Any, ...]]] = {kind: [] for kind in _TABLES}
        new = 0
        with self._engine.begin() as conn:
            # Exchanges without a known id: begun before a retry whose outcome
            # was unknown, finished already (late ops), or by an earlier writer.
            missing = (set(begins) | {uid for _, uid in row_ops} | set(updates)) - known.keys()
            if missing:
                found = select(_EXCHANGES.c.uid, _EXCHANGES.c.id)
                found = found.where(_EXCHANGES.c.uid.in_(missing))
                ids.update({u: i for u, i in conn.execute(found)})
            for uid, values in begins.items():
                if uid in ids:
                    updates.setdefault(uid, {}).update(values)
                else:
                    values = {**values, "uid": uid, "event_count": counts.pop(uid, 0)}
                    ids[uid] = conn.execute(_INSERT_EXCHANGE, values).scalar_one()
                    new += 1
            for (kind, uid), payload in row_ops.items():
                xid = known.get(uid) or ids.get(uid)
                if xid is None:
                    dropped.append((kind, uid, payload))
                    counts.pop(uid, None)
                else:
                    get = _GETTERS[kind]
                    rows[kind] += [(xid, *get(r)) for r in payload]
            for kind, kind_rows in rows.items():
                if kind_rows:  # one executemany (or COPY) per batch, not per exchange
                    self._insert_rows(conn, kind, kind_rows, careful)
            increments: list[tuple[int, int]] = []  # (events added, exchange id)
            for uid in updates.keys() | counts.keys():
                xid = known.get(uid) or ids.get(uid)
                if xid is None:
                    continue  # its begin never made it: nothing to update
                values = updates.get(uid, {})
                if careful:
                    count = select(func.count()).where(_EVENTS.c.exchange_id == xid)
                    values = {**values, "event_count": count.scalar_subquery()}
                elif counts.get(uid):
                    if not values:  # the common case: all of them in one executemany
                        increments.append((counts[uid], xid))
                        continue
                    values = {**values, "event_count": _EXCHANGES.c.event_count + counts[uid]}
                if values:
                    conn.execute(update(_EXCHANGES).where(_EXCHANGES.c.id == xid).values(values))
            if increments:
                conn.exec_driver_sql(self._sql_count, increments)
        # Committed: only now may the id map and the counters change.
        known.update(ids)
        for uid in finished:
            known.pop(uid, None)
        for op in dropped:
            self._drop(op)
        with self._lock:
            self._pending -= exchange_ops + len(rows[_EVENTS_OP]) + len(rows[_CHUNKS_OP])
            self._stats.batches += 1
            self._stats.exchanges += new
            self._stats.events += len(rows[_EVENTS_OP])
            self._stats.chunks += len(rows[_CHUNKS_OP])
            dropped_events = self._stats.dropped_events
        self._unchecked += len(rows[_EVENTS_OP]) + len(rows[_CHUNKS_OP])
        if self._failing:
            log.warning(
                f"ssetape storage: writing to {self._store.url} again after {self._failing} "
                f"failed attempts ({dropped_events} events dropped so far)"
            )
            self._failing = 0

    def _insert_rows(
        self, conn: Connection, kind: int, rows: list[tuple[Any, ...]], careful: bool
    ) -> None:
        if careful or self._store.is_sqlite:
            # Same syntax on SQLite (>= 3.24) and PostgreSQL.
            tail = " ON CONFLICT DO NOTHING" if careful else ""
            conn.exec_driver_sql(self._sql[kind] + tail, rows)
            return
        # PostgreSQL: COPY is about twice as fast as executemany.
        table, keys = _TABLES[kind]
        raw: Any = conn.connection.driver_connection
        with (
            raw.cursor() as cur,
            cur.copy(f"COPY {table} (exchange_id, {', '.join(keys)}) FROM STDIN") as copy,
        ):
            for row in rows:
                copy.write_row(row)
