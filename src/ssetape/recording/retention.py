"""Retention on a schedule: the recording process prunes its own store (``ssetape_retain``).

A recorder fed for months is where the store grows, so it is where the old goes: a daemon
thread of the recording process runs a :class:`~ssetape.storage.prune.Pruner` on the
process's one engine shortly after it starts, then every ``every`` seconds; never in the
proxy's process, so its event loop never waits for a delete. Whole exchanges older than
``exchanges`` go first (their events are not worth stripping first), then the events and
chunks of those older than ``events``. The pruner never touches an exchange still recording
and deletes in short batches, so the writer beside it waits at most one batch for a lock. On
a PostgreSQL store in day partitions the cut is the start of its UTC day, so each day leaves
as one dropped partition (up to a day later than the policy says).

Several recorders on one store may each prune: deletes are idempotent, and a batch that
finds its rows already gone counts nothing. A failed run (the store down, a lock held too
long) is one warning; the next run tries again.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading

from ssetape.recording.protocol import RetentionPolicy
from ssetape.storage.engine import one_line
from ssetape.storage.prune import Pruner, PruneReport
from ssetape.storage.store import Store

__all__ = ["FIRST_RUN", "Retention"]

log = logging.getLogger("ssetape.retention")  # shown at INFO by ssetape record

FIRST_RUN = 5.0  # seconds after start: the start-up itself (migrations, first streams) first
# Rows per transaction: smaller than `ssetape prune`'s, as the recorder's own writer waits
# behind each batch for SQLite's one write lock.
BATCH_ROWS = 5_000
STOP_WAIT = 10.0  # seconds close() waits for a batch in progress to commit


class _Stopped(Exception):
    """Raised between batches when the process is stopping: what is committed stays."""


class Retention:
    """Prunes ``store`` by ``policy`` in a daemon thread until :meth:`close`."""

    def __init__(
        self,
        store: Store,
        policy: RetentionPolicy,
        *,
        first: float = FIRST_RUN,
        batch_rows: int = BATCH_ROWS,
    ) -> None:
        self.policy = policy
        self._pruner = Pruner(store, batch_rows=batch_rows)
        # Never later than the schedule itself: with a short ``every`` the first run is too.
        self._first = min(first, policy.every)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ssetape-retention", daemon=True)
        self.runs = 0  # runs finished, failed or not
        self.failures = 0

    def start(self) -> None:
        self._thread.start()

    def close(self, timeout: float = STOP_WAIT) -> None:
        """Stop: at once between runs, after the batch in progress during one."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        wait = self._first
        # An Event, not sleep: close() ends the wait at once.
        while not self._stop.wait(wait):
            self.prune_now()
            wait = self.policy.every

    def prune_now(self, now: dt.datetime | None = None) -> list[PruneReport]:
        """One run, both prunes; each logged in one line if it removed anything, a warning
        if it failed (never raised: the next run tries again). The reports of those done."""
        now = now or dt.datetime.now(dt.UTC)
        spans = [(self.policy.exchanges, False), (self.policy.events, True)]
        reports: list[PruneReport] = []
        try:
            for span, events_only in spans:
                if span is None or self._stop.is_set():
                    continue
                cut = now - dt.timedelta(seconds=span)
                report = self._prune(cut, events_only)
                reports.append(report)
                if report.exchanges:
                    log.info("ssetape: retention: %s", report.line())
        except _Stopped as e:
            log.info("ssetape: retention: stopped with the recorder; %s", e)
        except Exception as e:  # the store down, a lock held too long: next time
            self.failures += 1
            log.warning("ssetape: retention: cannot prune (tried again later): %s", one_line(e))
        finally:
            self.runs += 1
        return reports

    def _prune(self, cut: dt.datetime, events_only: bool) -> PruneReport:
        def between(report: PruneReport) -> None:
            if self._stop.is_set():
                raise _Stopped(report.line())

        # Whole days: on PostgreSQL in day partitions a day leaves as one partition, not eaten
        # row by row by each run (a day longer kept at most).
        return self._pruner.prune(cut, events_only=events_only, whole_days=True, on_batch=between)
