"""Whether a recording proxy is healthy (alive, its recording process writing) and ready
(accepting traffic it will record), from what its :class:`RecordLink` knows.

The signals, all seen from the proxy, none asked of the store:

- the recording process is running, and has reported within :data:`SILENT` seconds (it
  reports twice a second from a thread of its own: silence means it is frozen or gone);
- it takes its pipe: bytes waiting for it that have not shrunk for :data:`STALL` seconds
  mean it is stuck; more than the link's bound means new chunks are being dropped;
- its store: the writer's latest news is a failed write (``store_errors`` went up after the
  last rows it stored), i.e. it is retrying a store that is down, locked or full. A store
  that fails while nothing is written is seen at the next write.

:meth:`Health.sample` is called every half second (off the proxy's loop); the answers read
the latest samples.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from ssetape.recording.link_health import LinkHealth
from ssetape.storage.runs import STALL_AFTER

__all__ = ["SILENT", "STALL", "Check", "Health"]

SILENT = 10.0  # seconds without a report from the recording process: it is not alive
STALL = STALL_AFTER  # seconds bytes wait for its pipe without it taking any: it is stalled


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    ok: bool
    state: str
    ready_only: bool = False  # a readiness check only (/readyz), not a health one (/healthz)


@dataclass(slots=True)
class _Seen:
    """What the samples of one recording process showed, and when."""

    pid: int | None
    counts: object = None
    reported_at: float = 0.0
    waiting: int = 0
    moved_at: float = 0.0  # its pipe last took bytes, or had none waiting
    errors: int = 0
    stored: int = 0
    failing: bool = False


class Health:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: _Seen | None = None

    def sample(self, link: LinkHealth | None, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        with self._lock:
            seen = self._seen
            if link is None or link.pid is None:
                self._seen = None
                return
            c = link.counts
            stored = c.events_recorded + c.exchanges_recorded + c.exchanges_finished
            if seen is None or seen.pid != link.pid:  # a new process: judged from now on
                seen = _Seen(link.pid, c, now, link.waiting, now, c.store_errors, stored)
                self._seen = seen
            if c is not seen.counts:
                seen.counts, seen.reported_at = c, now
            if link.waiting == 0 or link.waiting < seen.waiting:
                seen.moved_at = now
            seen.waiting = link.waiting
            if c.store_errors > seen.errors:
                seen.failing = True
            elif stored > seen.stored:
                seen.failing = False
            seen.errors, seen.stored = c.store_errors, stored

    def stalled_for(self, now: float) -> float:
        """Seconds the recording process of the latest sample has made no progress: sent
        no report, or had bytes waiting for its pipe that it did not take; 0 if none."""
        with self._lock:
            seen = self._seen
            if seen is None:
                return 0.0
            stuck = now - seen.moved_at if seen.waiting else 0.0
            return max(now - seen.reported_at, stuck)

    def checks(self, link: LinkHealth | None, now: float | None = None) -> list[Check]:
        """The recording process's checks: ``link`` None when the proxy records nothing."""
        now = time.monotonic() if now is None else now
        if link is None:
            return [Check("recording_process", True, "off (ssetape_record is off)")]
        if not link.spawned:
            return [Check("recording_process", True, "not started: nothing recorded yet")]
        self.sample(link, now)
        with self._lock:
            seen = self._seen
            if seen is None or not link.running:
                return [
                    Check("recording_process", False, "down: started again at the next exchange")
                ]
            silent = now - seen.reported_at
            stuck = now - seen.moved_at
            failing, last_error = seen.failing, link.counts.last_error
        process = (
            Check("recording_process", False, f"no report for {silent:.0f} s")
            if silent > SILENT
            else Check("recording_process", True, f"running (pid {link.pid})")
        )
        writing = (
            Check("writing", False, f"stalled: {link.waiting} bytes waiting for {stuck:.0f} s")
            if link.waiting and stuck > STALL
            else Check("writing", True, f"taking its input ({link.waiting} bytes waiting)")
        )
        opened = Check(
            "store",
            link.ready and not failing,
            "not open yet"
            if not link.ready
            else f"failing, retrying: {last_error}"
            if failing
            else "writing",
            ready_only=True,
        )
        full = link.waiting > link.bound
        backlog = Check(
            "backlog",
            not full,
            f"full: new chunks dropped ({link.waiting} bytes waiting)" if full else "room",
            ready_only=True,
        )
        return [process, writing, opened, backlog]
