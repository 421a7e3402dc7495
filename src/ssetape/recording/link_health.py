"""What a health check can read of a :class:`~ssetape.recording.link.RecordLink`, from any
thread: one snapshot of its recording process and of the bytes waiting for its pipe."""

from __future__ import annotations

from dataclasses import dataclass

from ssetape.recording.child import Child
from ssetape.recording.protocol import Counts

__all__ = ["LinkHealth"]


@dataclass(frozen=True, slots=True)
class LinkHealth:
    spawned: bool  # a recording process was started (beside the replayer: only once needed)
    pid: int | None  # the current one's, while one is there (it may have just died)
    running: bool  # it has not exited
    ready: bool  # it has opened the store
    # Its latest report (a new object with each one, twice a second: ``report`` in
    # ``recording.worker``), from a thread of its own, so it comes even while it parses.
    counts: Counts
    waiting: int  # bytes handed to the link that its pipe has not taken yet
    bound: int  # past this, new chunks are dropped (and counted)

    @classmethod
    def of(cls, child: Child | None, spawned: bool, waiting: int, bound: int) -> LinkHealth:
        if child is None:
            return cls(spawned, None, False, False, Counts(), waiting, bound)
        running = not child.ended.is_set()
        return cls(
            spawned, child.proc.pid, running, child.ready.is_set(), child.counts, waiting, bound
        )
