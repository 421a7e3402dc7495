"""Retention: what leaves a store, in bounded batches, while recorders keep writing to it.

An audit store fed for months only grows unless something takes the old out. :class:`Pruner`
deletes the exchanges that started before a cut, or with ``events_only`` only their events
and wire chunks (the bulk), keeping each exchange's summary row (model, usage, outcome,
timing, cost) and its findings as the audit trail, marked ``events_pruned_at``.

Safe beside recorders: an exchange still ``recording`` is never touched (it is counted as
kept), and each batch is its own short transaction of at most ``batch_rows`` rows, so no prune
holds a lock long enough to stall a writer, and one that stops half-way (Ctrl-C, a failover)
has committed what it reports and is resumed by running it again. An exchange of more rows
than that goes in slices of ``batch_rows`` events or chunks, a transaction each (a 10M-event
stream in one would hold SQLite's write lock past the writers' busy timeout): the first marks
it ``events_pruned_at`` (replay no longer serves what is left of it) and notes it in
``settings``, so that a stop half-way through it is resumed by the next run, events-only too;
the last deletes it (or its events-only mark) with its findings. SQLite gives the space back
page by page on stores created with incremental auto-vacuum (every new store since 0.2), and
through :meth:`Pruner.vacuum` on older ones.

On a PostgreSQL store, whose events are in day partitions (``ssetape.storage.partitions``), a
partition all of whose exchanges go is dropped whole first: one short lock, not millions of
row deletes. A day's partition holds the events written that day, of exchanges begun before
it ended, so every partition that ends before the cut qualifies, unless an exchange in its
range of ids is kept (still recording, or begun after the cut by a recorder whose clock is
ahead of the database's): then its rows go by exchange, as on SQLite. With ``whole_days``
the cut is the start of its UTC day, so that a prune on a schedule takes each day as one
partition instead of eating it row by row.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from sqlalchemy import Connection, delete, func, insert, select, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from ssetape.storage import partitions
from ssetape.storage.models import Chunk, Event, Exchange, Finding, Setting
from ssetape.storage.store import Store
from ssetape.vocabulary import ExchangeState

__all__ = ["BATCH_ROWS", "PruneReport", "Pruner"]

log = logging.getLogger("ssetape.storage")

_LOCK_NOT_AVAILABLE, _DEADLOCK = "55P03", "40P01"  # SQLSTATEs a busy detach may see
BATCH_ROWS = 20_000  # rows (events and chunks) deleted per transaction, at most
_CANDIDATES = 1_000  # exchanges looked at per batch
_SLICING = "prune_slicing_"  # + exchange id: a settings key while it is pruned in slices


@dataclass(slots=True)
class PruneReport:
    """What a prune removed (or, dry, would remove): every count is rows in the store."""

    cut: dt.datetime
    events_only: bool
    dry_run: bool
    exchanges: int = 0  # deleted, or (events_only) whose events were deleted
    events: int = 0
    chunks: int = 0
    findings: int = 0
    in_flight: int = 0  # started before the cut, still recording: kept
    batches: int = 0
    days_dropped: int = 0  # PostgreSQL: event partitions dropped whole (their rows in events)
    # SQLite: how much smaller the file got; PostgreSQL: the size of the partitions dropped.
    bytes_returned: int | None = None

    def to_json(self) -> dict[str, object]:
        doc = asdict(self)
        doc["cut"] = self.cut.isoformat()
        return doc

    def line(self) -> str:
        """What was done (or, dry, would be), in one line of counts."""
        verb = "would prune" if self.dry_run else "pruned"
        what = "the events of " if self.events_only else ""
        line = (
            f"{verb} {what}{self.exchanges:,} exchange(s) started before "
            f"{self.cut:%Y-%m-%d %H:%M:%S} UTC: {self.events:,} events, {self.chunks:,} chunks"
            + ("" if self.events_only else f", {self.findings:,} findings")
        )
        if not self.dry_run:
            line += f", in {self.batches:,} batch(es)"
        if self.days_dropped:
            line += f" and {self.days_dropped:,} day partition(s) dropped whole"
        if self.in_flight:
            line += f"; {self.in_flight:,} still recording, kept"
        if self.bytes_returned:
            size = self.bytes_returned
            room = f"{size / 1e6:,.1f} MB" if size >= 100_000 else f"{size / 1e3:,.0f} kB"
            line += f"; {room} returned to the file system"
        return line


class Pruner:
    def __init__(self, store: Store, *, batch_rows: int = BATCH_ROWS) -> None:
        if batch_rows < 1:
            raise ValueError(f"batch_rows must be at least 1, not {batch_rows}")
        self._store = store
        self._batch_rows = batch_rows
        self._sqlite = store.is_sqlite
        self._engine = store.writing_engine  # a batch reads, then writes
        self._dropped: list[tuple[int, int]] = []  # id ranges whose events left with a day
        self._slicing: list[int] = []  # exchanges a stopped prune left half sliced
        self._on_batch: Callable[[PruneReport], None] | None = None

    def prune(
        self,
        cut: dt.datetime,
        *,
        events_only: bool = False,
        dry_run: bool = False,
        whole_days: bool = False,
        on_batch: Callable[[PruneReport], None] | None = None,
    ) -> PruneReport:
        """Remove what started before ``cut`` (never what is still recording); ``on_batch``
        is told the running totals after each committed batch. ``whole_days``: on a store in
        day partitions, the cut is the start of its UTC day (the report says which)."""
        with self._engine.connect() as conn:
            days = partitions.partitions(conn)
        if days and whole_days:
            cut = dt.datetime.combine(cut.astimezone(dt.UTC).date(), dt.time(), dt.UTC)
        report = PruneReport(cut=cut, events_only=events_only, dry_run=dry_run)
        size = self._file_size()
        with Session(self._store.engine) as s:
            # Recording as the prune starts: kept for the whole run, as the report says, even
            # if one ends before its turn would come.
            recording = Exchange.started_at < cut, Exchange.state == ExchangeState.RECORDING
            flying = set(s.scalars(select(Exchange.id).where(*recording)))
        report.in_flight = len(flying)
        with self._engine.connect() as conn:
            keys = conn.scalars(select(Setting.key).where(Setting.key.startswith(_SLICING)))
            self._slicing = [int(key.removeprefix(_SLICING)) for key in keys]
        if dry_run:
            self._count(report, flying)
            return report
        self._dropped = []
        self._on_batch = on_batch
        self._drop_days(report, days, on_batch)
        after = 0  # exchanges are taken in id order: the last one looked at
        while (step := self._batch(report, after, flying)) is not None:
            done, after = step
            if done:
                report.batches += 1
                if on_batch is not None:
                    on_batch(report)
        if size is not None and report.batches:
            self._checkpoint()  # freed pages leave the file when the WAL is checkpointed
            report.bytes_returned = max(0, size - (self._file_size() or 0))
        return report

    def vacuum(self) -> int:
        """SQLite: rewrite the file, returning every free page, and switch it to incremental
        auto-vacuum so later prunes return space as they go; the bytes returned. Writers wait
        (their busy timeout) while it runs. PostgreSQL reuses freed space by itself: 0."""
        if not self._sqlite:
            return 0
        size = self._file_size() or 0
        self._pragma("PRAGMA auto_vacuum = INCREMENTAL")
        self._pragma("VACUUM")
        self._checkpoint()
        return max(0, size - (self._file_size() or 0))

    def _drop_days(
        self,
        report: PruneReport,
        days: list[partitions.Partition],
        on_batch: Callable[[PruneReport], None] | None,
    ) -> None:
        """Drop each partition that holds only events of exchanges this prune removes."""
        with self._engine.connect() as conn:
            # Detached by a prune that stopped before its DROP: checked then, counted now.
            stale = [(name, self._size(conn, name)) for name in partitions.leftovers(conn)]
        for name, (rows, size) in stale:
            self._drop(report, name, name, (0, -1, rows, size), 0.0, 0.0, on_batch)
        with self._engine.connect() as conn:
            closed = conn.execute(select(func.now())).scalar_one() - partitions.CLOSED_AFTER
        for day in days:
            ends = day.ends_at
            # Its day over (nothing more is written there) and before the cut.
            if ends is None or ends > report.cut or ends > closed:
                continue
            t0 = time.perf_counter()
            with self._engine.connect() as conn:
                found = self._droppable(conn, report, day.name)
            if found is None:
                continue  # an exchange of its range stays: its rows go one by one
            checked = time.perf_counter()
            gone = self._detach(day.name)
            detached = time.perf_counter() - checked
            self._drop(report, day.name, gone, found, checked - t0, detached, on_batch)

    def _detach(self, name: str) -> str:
        """Detach partition ``name``, trying again while writers hold what it needs."""
        for attempt in range(partitions.DETACH_TRIES - 1):
            try:
                with self._engine.begin() as conn:
                    return partitions.detach(conn, name)
            except DBAPIError as exc:
                if getattr(exc.orig, "sqlstate", None) not in (_LOCK_NOT_AVAILABLE, _DEADLOCK):
                    raise
            time.sleep(0.05 * (attempt + 1))
        with self._engine.begin() as conn:  # the last try: its error is the prune's
            return partitions.detach(conn, name)

    def _drop(
        self,
        report: PruneReport,
        name: str,
        gone: str,
        found: tuple[int, int, int, int],
        checking: float,
        detaching: float,
        on_batch: Callable[[PruneReport], None] | None,
    ) -> None:
        t0 = time.perf_counter()
        with self._engine.begin() as conn:
            conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{partitions.LOCK_WAIT}'")
            conn.exec_driver_sql(f"DROP TABLE {gone}")
        lo, hi, rows, size = found
        # A dropped table's files are unlinked: the space is the file system's again.
        report.bytes_returned = (report.bytes_returned or 0) + size
        log.info(
            f"ssetape: prune: dropped {name} ({rows:,} events, {size / 1e6:,.1f} MB): "
            f"detached in {detaching:.3f} s (what writers may wait), its files freed in "
            f"{time.perf_counter() - t0:.3f} s, after {checking:.3f} s to check and count it"
        )
        if hi >= lo:
            self._dropped.append((lo, hi))
        report.events += rows
        report.days_dropped += 1
        if on_batch is not None:
            on_batch(report)

    @staticmethod
    def _size(conn: Connection, name: str) -> tuple[int, int]:
        """Its rows and its bytes on disk (a read: no lock that stops a writer)."""
        rows, size = conn.exec_driver_sql(
            f"SELECT count(*), pg_total_relation_size('{name}') FROM {name}"
        ).one()
        return int(rows), int(size)

    @staticmethod
    def _droppable(
        conn: Connection, report: PruneReport, name: str
    ) -> tuple[int, int, int, int] | None:
        """The range of exchange ids with events in partition ``name``, its rows and its
        bytes on disk, if every exchange in that range is pruned."""
        ends = conn.exec_driver_sql(  # both ends read from its primary key, not its rows
            f"SELECT (SELECT exchange_id FROM {name} ORDER BY exchange_id LIMIT 1), "
            f"(SELECT exchange_id FROM {name} ORDER BY exchange_id DESC LIMIT 1)"
        ).one()
        lo, hi = ends
        if lo is None:
            return 0, -1, 0, 0
        kept = (
            select(Exchange.id)
            .where(Exchange.id.between(lo, hi))
            .where(
                (Exchange.started_at >= report.cut) | (Exchange.state == ExchangeState.RECORDING)
            )
        )
        if conn.execute(kept.limit(1)).first() is not None:
            return None
        return lo, hi, *Pruner._size(conn, name)

    def _candidates(self, s: Session, report: PruneReport, after: int) -> Sequence[tuple[int, int]]:
        """The next exchanges to prune and the rows (events and wire chunks) each holds."""
        stmt = (
            select(Exchange.id, Exchange.event_count)
            .where(Exchange.id > after, Exchange.started_at < report.cut)
            .where(Exchange.state != ExchangeState.RECORDING)
            .order_by(Exchange.id)
            .limit(_CANDIDATES)
        )
        if report.events_only:  # and those a stopped prune marked before it was done
            stmt = stmt.where(Exchange.events_pruned_at.is_(None) | Exchange.id.in_(self._slicing))
        found = [(row[0], row[1] or 0) for row in s.execute(stmt)]
        chunks = select(Chunk.exchange_id, func.count()).group_by(Chunk.exchange_id)
        chunks = chunks.where(Chunk.exchange_id.in_([xid for xid, _ in found]))
        wire: dict[int, int] = {row[0]: row[1] for row in s.execute(chunks)}
        # An exchange whose events went with their partition weighs nothing but its chunks
        # (its events past midnight, if any, are bounded by _CANDIDATES).
        return [
            (xid, wire.get(xid, 0) + (0 if self._gone(xid) else events)) for xid, events in found
        ]

    def _gone(self, xid: int) -> bool:
        return any(lo <= xid <= hi for lo, hi in self._dropped)

    def _batch(self, report: PruneReport, after: int, flying: set[int]) -> tuple[int, int] | None:
        """One transaction: the next exchanges whose rows fit in a batch (one at least);
        how many were done and the last id looked at (None: nothing left)."""
        with Session(self._engine) as s, s.begin():
            candidates = self._candidates(s, report, after)
            if not candidates:
                return None
            ids: list[int] = []
            rows = 0
            for xid, count in candidates:
                if ids and rows + count > self._batch_rows:
                    break
                after = xid
                if xid not in flying:
                    ids.append(xid)
                    rows += count
            if not ids:
                return 0, after
            if rows <= self._batch_rows:
                self._delete(s.connection(), report, ids)
                self._forget(s.connection(), ids)
        if rows > self._batch_rows:  # one exchange (a batch takes it alone): in slices
            self._slice(report, ids[0])
            with self._engine.begin() as conn:
                self._delete(conn, report, ids)
                self._forget(conn, ids)
        self._return_space()
        return len(ids), after

    def _slice(self, report: PruneReport, xid: int) -> None:
        """Delete exchange ``xid``'s events and chunks, ``batch_rows`` a transaction, each
        counted as a batch; the first marks it pruned and notes it (see the module's doc)."""
        for table, counted in ((Event, "events"), (Chunk, "chunks")):
            while True:
                with self._engine.begin() as conn:
                    if table is Event and xid not in self._slicing:
                        now = dt.datetime.now(dt.UTC)
                        mark = update(Exchange).where(Exchange.id == xid)
                        conn.execute(mark.values(events_pruned_at=now))
                        conn.execute(insert(Setting).values(key=f"{_SLICING}{xid}", value=""))
                        self._slicing.append(xid)
                    mine = table.exchange_id == xid
                    # The first seq of the next slice, read from the primary key.
                    nxt = select(table.seq).where(mine).order_by(table.seq)
                    bound = conn.scalar(nxt.offset(self._batch_rows).limit(1))
                    stmt = delete(table).where(mine)
                    if bound is not None:
                        stmt = stmt.where(table.seq < bound)
                    gone = conn.execute(stmt).rowcount
                    setattr(report, counted, getattr(report, counted) + gone)
                if gone:
                    report.batches += 1
                    if self._on_batch is not None:
                        self._on_batch(report)
                    self._return_space()
                if bound is None:
                    break

    def _forget(self, conn: Connection, ids: list[int]) -> None:
        """Their notes of being pruned in slices, now that they are done."""
        keys = [f"{_SLICING}{xid}" for xid in ids if xid in self._slicing]
        if keys:
            conn.execute(delete(Setting).where(Setting.key.in_(keys)))

    @staticmethod
    def _delete(conn: Connection, report: PruneReport, ids: list[int]) -> None:
        """The exchanges ``ids`` (their events and chunks, findings and row; events-only: their
        events and chunks, and the mark), counted in ``report``."""
        report.events += conn.execute(delete(Event).where(Event.exchange_id.in_(ids))).rowcount
        report.chunks += conn.execute(delete(Chunk).where(Chunk.exchange_id.in_(ids))).rowcount
        if report.events_only:
            now = dt.datetime.now(dt.UTC)
            marked = update(Exchange).where(Exchange.id.in_(ids)).values(events_pruned_at=now)
            report.exchanges += conn.execute(marked).rowcount
        else:
            where = Finding.exchange_id.in_(ids)
            report.findings += conn.execute(delete(Finding).where(where)).rowcount
            gone = delete(Exchange).where(Exchange.id.in_(ids))
            report.exchanges += conn.execute(gone).rowcount

    def _count(self, report: PruneReport, flying: set[int]) -> None:
        """A dry run: the same counts, read."""
        old = select(Exchange.id).where(
            Exchange.started_at < report.cut, Exchange.state != ExchangeState.RECORDING
        )
        if flying:
            old = old.where(Exchange.id.not_in(flying))
        if report.events_only:
            old = old.where(Exchange.events_pruned_at.is_(None) | Exchange.id.in_(self._slicing))
        ids = old.scalar_subquery()
        with Session(self._store.engine) as s:
            report.exchanges = s.scalar(select(func.count()).where(Exchange.id.in_(ids))) or 0
            report.events = s.scalar(select(func.count()).where(Event.exchange_id.in_(ids))) or 0
            report.chunks = s.scalar(select(func.count()).where(Chunk.exchange_id.in_(ids))) or 0
            if not report.events_only:
                found = select(func.count()).where(Finding.exchange_id.in_(ids))
                report.findings = s.scalar(found) or 0

    def _return_space(self) -> None:
        if self._sqlite:
            # Every page the batch freed (a batch is bounded, so is this); a no-op on a store
            # without incremental auto-vacuum (see vacuum()).
            self._pragma("PRAGMA incremental_vacuum")

    def _checkpoint(self) -> None:
        self._pragma("PRAGMA wal_checkpoint(TRUNCATE)")

    def _pragma(self, sql: str) -> None:
        """A pragma stepped to its end, outside any transaction (executescript steps it to
        completion: Python 3.11's execute() stops incremental_vacuum after one page)."""
        raw = self._store.engine.raw_connection()
        try:
            raw.driver_connection.executescript(sql + ";")  # type: ignore[union-attr]
        finally:
            raw.close()

    def _file_size(self) -> int | None:
        path = self._store.path
        if path is None:
            return None
        return sum(
            p.stat().st_size for p in (path, path.with_name(path.name + "-wal")) if p.exists()
        )
