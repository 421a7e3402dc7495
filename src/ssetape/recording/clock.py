"""The recorder's clock: every offset, TTFB and duration is a difference of monotonic ticks;
only an exchange's start (``started_at``) is read from the wall clock, once.

An NTP step, a VM resumed from a snapshot or an operator's ``date -s`` moves the wall clock
by minutes or days at once: an offset measured on it goes negative (the export then cannot be
imported again) or puts a day-long pause into the replay. The monotonic clock never steps;
NTP only slews its rate, by a few hundred parts per million at most.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

__all__ = ["monotonic_of", "since", "started_at", "ticks"]

# How old a wall-clock stamp may be taken to be: past this the wall clock stepped between the
# stamp and now, and "now" is the better offset zero.
_MAX_AGE = 60.0


def ticks() -> int:
    """Now on the monotonic clock, in microseconds: only the difference of two means anything
    (it is the same clock in every process of the machine)."""
    return time.monotonic_ns() // 1000


def since(t0: int) -> int:
    """Microseconds elapsed since ``t0``, a ``ticks()`` value."""
    return ticks() - t0


def started_at(wall: float | None = None) -> datetime:
    """When an exchange began, on the wall clock: ``wall`` (a ``time.time()`` value the proxy
    stamped), else now."""
    return datetime.fromtimestamp(time.time() if wall is None else wall, UTC)


def monotonic_of(wall: float | None) -> float:
    """A wall-clock stamp (mitmproxy's ``timestamp_end``) as a ``time.monotonic()`` value, the
    offset zero a replay is timed from: it is the same clock in every process of the machine,
    so the proxy can hand it to a timed server, and no step of the wall clock during a replay
    moves it. Only the stamp's age is read on the wall clock, at once (bounded to 0-60 s)."""
    now = time.monotonic()
    if wall is None:
        return now
    return now - min(max(time.time() - wall, 0.0), _MAX_AGE)
