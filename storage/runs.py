"""Recorder runs: each recorder's counters in ``recorder_runs``, and who is still alive.

A recorder's losses (events it could not store, store errors) must stay visible after it
exits, so each recorder keeps one row up to date from a thread of its own
(:class:`RunReporter`); ``ssetape stats`` sums them with :meth:`Runs.totals`. What it stored
is written by the very transactions that store it (:meth:`Runs.count_stored`): exact after a
``kill -9``, and never recounted from rows a prune may have removed since.

The rows double as a heartbeat for crash recovery. An exchange stays ``recording`` when
its recorder dies (``kill -9``, power loss); :meth:`Runs.mark_gone_interrupted` turns it
into ``interrupted`` once that recorder is known to be gone. The rule, for a recorder id
``hostname:pid:unix_time``:

- its run row has ``stopped_at`` (it exited cleanly, but could not finish the row), or
- it ran on this host and its pid is not running, or runs a process started after the id
  was made (the pid was reused), or
- it ran on another host and its run row has not been updated for ``STALE_AFTER`` seconds
  (clocks of a fleet are assumed within a minute of each other, as NTP keeps them).

Otherwise its rows are left alone: a recorder never marks rows of one that may be alive.
One that is not gone but whose row has had no heartbeat for ``STALL_AFTER`` seconds is
``stalled`` (its reporter saves every 2 s: the process is frozen, stopped, or its store takes
none of its writes); unlike ``gone``, nothing is done about it, so a tighter clock between
hosts is assumed (NTP keeps them within milliseconds).
If the rule is wrong anyway (a recorder on another host cut off from the store for longer
than ``STALE_AFTER``, or two containers with the same hostname and separate pid
namespaces), the damage undoes itself: the live recorder's own finish sets the state.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, cast

from sqlalchemy import Connection, Table, select, update
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from ssetape.recorder_id import RecorderId
from ssetape.storage.engine import check_writable, one_line
from ssetape.storage.models import Exchange, RecorderRun
from ssetape.storage.store import Store
from ssetape.vocabulary import ExchangeState, Fault, RunState

log = logging.getLogger("ssetape.storage")

STALE_AFTER = 120.0  # seconds without a heartbeat before another host's recorder is gone
# Seconds a recorder alive makes no progress before it is stalled: no heartbeat in its run row
# (`stats --runs`), or its pipe not taking what waits (recording.health, its log lines).
STALL_AFTER = 15.0
# Also what a clean stop leaves when the store did not answer in time to take the ends.
INTERRUPTED = (
    "recorder gone before the exchange was stored whole (a crash, a kill, or a store that did "
    "not answer at stop)"
)
_RUNS = cast(Table, RecorderRun.__table__)
# Written by the recorder's commits themselves (Runs.count_stored), in the same transaction.
_STORED = ("exchanges_recorded", "events_recorded")
_COUNTERS = (
    "exchanges_recorded",
    "events_recorded",
    "exchanges_lost",
    "events_lost",
    "store_errors",
)


@dataclasses.dataclass(frozen=True)
class RunCounts:
    """What one recorder stored and lost so far (from its writer's stats)."""

    exchanges_recorded: int = 0
    events_recorded: int = 0
    exchanges_lost: int = 0
    events_lost: int = 0
    store_errors: int = 0
    last_error: str | None = None


def recorder_gone(
    recorder: str,
    updated_at: dt.datetime | None,
    *,
    hostname: str,
    stopped: bool = False,
    now: dt.datetime | None = None,
) -> bool:
    """Whether ``recorder`` is known to be gone (the rule is in the module docstring).

    ``updated_at``: its run row's last heartbeat, None without a run row; ``stopped``: the
    row has ``stopped_at``; ``hostname``: the host this runs on.
    """
    if stopped:
        return True
    rid = RecorderId.parse(recorder)
    if rid is not None and rid.host == hostname:
        return not rid.alive()
    if updated_at is None:
        return False  # another host and no heartbeat to judge by (an older ssetape)
    now = now or dt.datetime.now(dt.UTC)
    return (now - updated_at).total_seconds() > STALE_AFTER


class Runs:
    """Reads and writes ``recorder_runs``; every method opens its own short transaction."""

    def __init__(self, store: Store, *, hostname: str | None = None) -> None:
        self.store = store
        self.hostname = hostname or socket.gethostname()
        self._engine = store.writing_engine  # read-then-write transactions
        self._upserts: dict[tuple[str, ...], Any] = {}  # by the columns a conflict changes

    def save(
        self,
        recorder: str,
        started_at: dt.datetime,
        counts: RunCounts,
        *,
        stopped_at: dt.datetime | None = None,
        now: dt.datetime | None = None,
        keep_stored: bool = False,
        name: str | None = None,
    ) -> None:
        """Create or update one recorder's row (an upsert: safe to repeat after a failure).

        ``keep_stored``: a row that exists keeps its stored counts, which its recorder's
        commits write (:meth:`count_stored`): they are exact, these may be late. ``name``:
        its instance's; None leaves the row's as it is."""
        values: dict[str, Any] = {
            "recorder": recorder,
            "started_at": started_at,
            "updated_at": now or dt.datetime.now(dt.UTC),
            "stopped_at": stopped_at,
            # Its own fields only: a recording process's counts (a subclass) say more.
            **{f.name: getattr(counts, f.name) for f in dataclasses.fields(RunCounts)},
        }
        if name is not None:
            values["name"] = name
        fixed = ("recorder", "started_at", *(_STORED if keep_stored else ()))
        changed = {k: v for k, v in values.items() if k not in fixed}
        if self.store.path is not None:
            check_writable(self.store.path)
        with self._engine.begin() as conn:
            conn.execute(self._upsert(tuple(changed)), values)

    def count_stored(
        self, conn: Connection, recorder: str, started_at: dt.datetime, *, exchanges: int,
        events: int,
    ) -> None:  # fmt: skip
        """In the transaction that stores them (``conn``): what ``recorder`` has stored in
        all, as it will be once that commits. The run row then never says less or more than
        its recorder committed, whatever it dies of and whatever a prune removes later."""
        values = {"recorder": recorder, "started_at": started_at,
                  "updated_at": dt.datetime.now(dt.UTC),
                  "exchanges_recorded": exchanges, "events_recorded": events}  # fmt: skip
        conn.execute(self._upsert(_STORED), values)

    def _upsert(self, changed: tuple[str, ...]) -> Any:
        """The upsert that sets ``changed`` on a conflict to the values it was given. Built
        once: the writer counts each of its commits with it, and a statement built per call
        (its values inline) cost more than the rest of the commit's statements."""
        stmt = self._upserts.get(changed)
        if stmt is not None:
            return stmt
        # Imported here: only recorders save a run, and PostgreSQL's dialect (all its drivers'
        # modules) is 40 ms of the start of every command that opens an SQLite store.
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        insert = (sqlite_insert if self.store.is_sqlite else pg_insert)(_RUNS)
        stmt = insert.on_conflict_do_update(
            index_elements=[_RUNS.c.recorder], set_={k: insert.excluded[k] for k in changed}
        )
        self._upserts[changed] = stmt
        return stmt

    def get(self, recorder: str) -> RecorderRun | None:
        with self.store.Session() as s:
            return s.get(RecorderRun, recorder)

    def all(self) -> list[RecorderRun]:
        with self.store.Session() as s:
            return list(s.scalars(select(RecorderRun).order_by(RecorderRun.started_at)))

    def status(self, run: RecorderRun, now: dt.datetime | None = None) -> RunState:
        """``stopped`` (exited cleanly), ``gone`` (died, or silent for long), ``stalled``
        (alive, no heartbeat for STALL_AFTER seconds) or ``running``."""
        if run.stopped_at is not None:
            return RunState.STOPPED
        now = now or dt.datetime.now(dt.UTC)
        if self.gone(run.recorder, run.updated_at, now=now):
            return RunState.GONE
        silent = (now - run.updated_at).total_seconds()
        return RunState.STALLED if silent > STALL_AFTER else RunState.RUNNING

    def gone(
        self,
        recorder: str,
        updated_at: dt.datetime | None,
        *,
        stopped: bool = False,
        now: dt.datetime | None = None,
    ) -> bool:
        return recorder_gone(recorder, updated_at, hostname=self.hostname, stopped=stopped, now=now)

    def mark_gone_interrupted(self, *, alive: Iterable[str] = ()) -> int:
        """Exchanges still ``recording`` whose recorder is gone become ``interrupted``.

        ``alive``: recorder ids known to be running (the caller's own). Returns how many
        exchanges changed. Cheap when nothing is in flight: one query on an indexed column.
        """
        keep = set(alive)
        with self._engine.begin() as conn:
            recorders = conn.execute(
                select(Exchange.recorder)
                .where(Exchange.state == ExchangeState.RECORDING)
                .distinct()
            ).scalars()
            candidates = [r for r in recorders if r is not None and r not in keep]
            if not candidates:
                return 0
            beats = {
                row.recorder: row
                for row in conn.execute(
                    select(_RUNS.c.recorder, _RUNS.c.updated_at, _RUNS.c.stopped_at).where(
                        _RUNS.c.recorder.in_(candidates)
                    )
                )
            }
            now = dt.datetime.now(dt.UTC)
            gone = []
            for r in candidates:
                beat = beats.get(r)
                updated = beat.updated_at if beat is not None else None
                stopped = beat is not None and beat.stopped_at is not None
                if self.gone(r, updated, stopped=stopped, now=now):
                    gone.append(r)
            if not gone:
                return 0
            mine = (Exchange.state == ExchangeState.RECORDING, Exchange.recorder.in_(gone))
            # An error the recorder stored already (e.g. a capture failure) is kept.
            conn.execute(
                update(Exchange).where(*mine, Exchange.error.is_(None)).values(error=INTERRUPTED)
            )
            # Its recorder's doing, not the provider's (vocabulary.Fault).
            changed = conn.execute(
                update(Exchange)
                .where(*mine)
                .values(state=ExchangeState.INTERRUPTED, fault=Fault.SSETAPE)
            )
        return int(changed.rowcount)

    def totals(self) -> dict[str, Any]:
        """Sums over every run and the runs themselves, for ``ssetape stats``.

        Keys: ``exchanges_recorded``, ``events_recorded``, ``exchanges_lost``,
        ``events_lost``, ``store_errors`` (ints) and ``runs`` (one dict per run, oldest
        first, with those counters, ``recorder``, ``name``, ``host``, ``status``,
        ``started_at``, ``updated_at``, ``stopped_at`` and ``last_error``).
        """
        now = dt.datetime.now(dt.UTC)
        runs: list[dict[str, Any]] = []
        sums = dict.fromkeys(_COUNTERS, 0)
        for run in self.all():
            row = {c.key: getattr(run, c.key) for c in _RUNS.columns}
            row["status"] = self.status(run, now)
            rid = RecorderId.parse(run.recorder)
            row["host"] = rid.host if rid is not None else None
            runs.append(row)
            for key in _COUNTERS:
                sums[key] += row[key]
        return {**sums, "runs": runs}


class RunReporter:
    """Keeps one recorder's ``recorder_runs`` row current, from its own daemon thread.

    The recording process never waits for it: ``counts`` is called in this thread and
    must only read in-memory counters. A save that fails (store down) is simply tried again
    at the next tick; the writer already logs the outage, so this stays quiet until exit.
    """

    def __init__(
        self,
        runs: Runs,
        recorder: str,
        counts: Callable[[], RunCounts],
        *,
        interval: float = 2.0,
        sweep_every: float = 60.0,
        name: str | None = None,
    ) -> None:
        self.runs = runs
        self.recorder = recorder
        self.name = name  # its instance's (it may be told later: the port the proxy chose)
        self.started_at = dt.datetime.now(dt.UTC)
        self.saved = False  # the last save worked
        self.last_failure: str | None = None
        self._counts = counts
        self._interval = interval
        self._sweep_every = sweep_every
        self._active = threading.Event()
        self._stop = threading.Event()
        self._wake = threading.Event()  # set with either of the two above
        self._thread: threading.Thread | None = None

    def start(self, *, active: bool = True) -> None:
        """Start the thread; with ``active=False`` nothing is written until :meth:`activate`
        (a replaying proxy must not touch its tape until it records something)."""
        if active:
            self._active.set()
            self._wake.set()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="ssetape-runs", daemon=True)
            self._thread.start()

    @property
    def active(self) -> bool:
        return self._active.is_set()

    def activate(self) -> None:
        if not self._active.is_set():
            self._active.set()
            self._wake.set()

    def stop(self, timeout: float = 5.0) -> bool:
        """Final save with ``stopped_at``; True if it was stored within ``timeout``."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                self.saved = False
                self.last_failure = self.last_failure or f"no answer within {timeout:g} s"
        return self.saved

    def stored(self, conn: Connection, exchanges: int, events: int) -> None:
        """In the writer's transaction: what this recorder stored in all once it commits."""
        self.runs.count_stored(conn, self.recorder, self.started_at, exchanges=exchanges,
                               events=events)  # fmt: skip

    def _run(self) -> None:
        while not self._active.is_set():
            self._wake.wait()
            self._wake.clear()
            if self._stop.is_set() and not self._active.is_set():
                return  # stopped without ever recording: leave the store untouched
        next_sweep = time.monotonic()
        while True:
            stopping = self._stop.is_set()
            self._save(dt.datetime.now(dt.UTC) if stopping else None)
            if stopping:
                return
            if time.monotonic() >= next_sweep:
                self._sweep()
                next_sweep = time.monotonic() + self._sweep_every
            self._stop.wait(self._interval)

    def _save(self, stopped_at: dt.datetime | None) -> None:
        try:
            counts = self._counts()
            self.runs.save(
                self.recorder, self.started_at, counts, stopped_at=stopped_at, keep_stored=True,
                name=self.name,
            )  # fmt: skip
        except Exception as exc:
            self.saved = False
            self.last_failure = one_line(exc)
            log.debug("ssetape: cannot save recorder counters: %s", self.last_failure)
        else:
            self.saved = True
            self.last_failure = None

    def _sweep(self) -> None:
        with contextlib.suppress(Exception):  # only housekeeping: the next sweep retries
            n = self.runs.mark_gone_interrupted(alive=[self.recorder])
            if n:
                log.info("ssetape: %d exchange(s) of stopped recorders marked interrupted", n)
