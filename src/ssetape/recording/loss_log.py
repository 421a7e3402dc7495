"""The log lines of a recording that loses ground: events dropped, and stalls.

Two kinds of episode, each logged when it starts, while it lasts (with counts) after
:data:`REPEAT` seconds, then after twice as long each time up to :data:`LONGEST` (an outage of
hours is not a line every 10 s), and when it ends (the total, and how long):

- **dropping**: the events lost went up (chunks past the link's bound when the recording
  process fell behind, rows past its writer's, what a process that died held). Over once
  no new loss came for :data:`QUIET` seconds, so that a backlog that empties and fills again
  is one episode, not a line a second;
- **stalled**: the recording process made no progress for ``STALL`` seconds (no report, or
  bytes waiting for its pipe that it did not take: ``recording.health``'s rule, that of
  ``/healthz``; ``ssetape stats --runs`` says ``stalled`` after as long without a heartbeat
  in its run row). Over when it moves again, or is gone.

Every count is read from the link's one ledger (``RecordLink.totals``), never counted here:
the lines, the exit line and the run rows agree. :class:`LossLog` is given samples (every
half second, on the proxy's loop: ``addons.logs``) and keeps no thread of its own.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ssetape.recording.health import STALL, Health
from ssetape.recording.link_health import LinkHealth
from ssetape.recording.log_format import FIELDS

__all__ = ["LONGEST", "QUIET", "REPEAT", "LossLog"]

log = logging.getLogger("ssetape.recorder")

REPEAT = 10.0  # seconds between two lines of one episode, at least
LONGEST = 300.0  # seconds between two lines of one episode, at most
QUIET = 5.0  # seconds without a new loss before a dropping episode is over


@dataclass(slots=True)
class _Episode:
    began: float  # monotonic
    base: int  # events lost before it began (the ledger's count)
    told_at: float  # its latest line
    told_lost: int  # the ledger's count at that line
    wait: float  # seconds until its next line may come
    seen_at: float = 0.0  # its latest new loss (dropping)
    pid: int | None = None  # the recording process that stalled (stalled)


class LossLog:
    def __init__(self, *, repeat: float = REPEAT, quiet: float = QUIET) -> None:
        self.repeat = repeat
        self.quiet = quiet
        self._health = Health()
        self._lost: int | None = None  # the ledger's count at the latest sample
        self._dropping: _Episode | None = None
        self._stalled: _Episode | None = None
        self._moving_lost = 0  # the ledger's count when the recording process last moved

    def sample(self, link: LinkHealth | None, lost: int, now: float) -> None:
        """One look at the link: ``link`` its health, ``lost`` the events its ledger counts
        lost so far."""
        self._drops(link, lost, now)
        self._health.sample(link, now)
        self._stall(link, lost, now)

    def close(self, lost: int, now: float, why: str) -> None:
        """The link is let go of: the episodes under way end here, ``why`` (e.g. "the proxy
        stops"); the next sample starts afresh."""
        self._drops(None, lost, now)
        if self._dropping is not None:
            self._end_drops(lost, f"dropping ended as {why}")
        if self._stalled is not None:
            self._end_stall(lost, now, f"the recording process still stalled as {why}")
        self._lost = None
        self._health = Health()

    # Dropping.

    def _drops(self, link: LinkHealth | None, lost: int, now: float) -> None:
        before, self._lost = self._lost, lost
        ep = self._dropping
        if before is None or lost < before:  # a new link: its own count from now on
            return
        if lost > before:
            if ep is None:
                self._dropping = _Episode(now, before, now, lost, self.repeat, now)
                full = link is not None and link.waiting > link.bound
                waiting = link.waiting if link is not None else 0
                why = f"; its input is full, {waiting:,} bytes waiting" if full else ""
                _warn(
                    f"ssetape: recording fell behind: dropping events ({lost - before:,} so "
                    f"far{why})",
                    event="drop_start", events_dropped=lost - before, events_lost=lost,
                )  # fmt: skip
                return
            ep.seen_at = now
            if now - ep.told_at >= ep.wait:
                _warn(
                    f"ssetape: recording still behind: {lost - ep.told_lost:,} events dropped "
                    f"in the last {now - ep.told_at:.0f} s, {lost - ep.base:,} since it began "
                    f"{now - ep.began:.0f} s ago",
                    event="drop_continues", events_dropped=lost - ep.base, events_lost=lost,
                    seconds=round(now - ep.began, 1),
                )  # fmt: skip
                ep.told_at, ep.told_lost, ep.wait = now, lost, min(ep.wait * 2, LONGEST)
        elif ep is not None and now - ep.seen_at >= self.quiet:
            self._end_drops(lost, "dropping ended")

    def _end_drops(self, lost: int, how: str) -> None:
        ep, self._dropping = self._dropping, None
        assert ep is not None
        took = ep.seen_at - ep.began
        _warn(
            f"ssetape: {how}: {lost - ep.base:,} events dropped over {_s(took)}",
            event="drop_end", events_dropped=lost - ep.base, events_lost=lost,
            seconds=round(took, 1),
        )  # fmt: skip

    # Stalled.

    def _stall(self, link: LinkHealth | None, lost: int, now: float) -> None:
        ep = self._stalled
        pid = link.pid if link is not None and link.running else None
        if ep is not None and pid != ep.pid:
            self._end_stall(lost, now, "the stalled recording process ended")
            ep = None
        idle = self._health.stalled_for(now) if pid is not None else 0.0
        if idle < 1.0:  # it moved since about the latest sample
            self._moving_lost = lost
        if idle < STALL:
            if ep is not None:
                self._end_stall(lost, now, "the recording process resumed")
            return
        waiting = link.waiting if link is not None else 0
        if ep is None:
            self._stalled = _Episode(now - idle, self._moving_lost, now, lost, self.repeat, pid=pid)
            _warn(
                f"ssetape: the recording process stalled: no progress for {idle:.0f} s "
                f"({waiting:,} bytes waiting for it)",
                event="stall_start", seconds=round(idle, 1), bytes_waiting=waiting,
            )  # fmt: skip
        elif now - ep.told_at >= ep.wait:
            _warn(
                f"ssetape: the recording process still stalled, for {now - ep.began:.0f} s "
                f"({lost - ep.base:,} events dropped meanwhile, {waiting:,} bytes waiting)",
                event="stall_continues", seconds=round(now - ep.began, 1),
                events_dropped=lost - ep.base, bytes_waiting=waiting,
            )  # fmt: skip
            ep.told_at, ep.wait = now, min(ep.wait * 2, LONGEST)

    def _end_stall(self, lost: int, now: float, how: str) -> None:
        ep, self._stalled = self._stalled, None
        assert ep is not None
        took = now - ep.began
        _warn(
            f"ssetape: {how}: stalled for {_s(took)} ({lost - ep.base:,} events dropped "
            "meanwhile)",
            event="stall_end", seconds=round(took, 1), events_dropped=lost - ep.base,
        )  # fmt: skip


def _s(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"


def _warn(msg: str, **fields: object) -> None:
    # Warnings: the terminal log shows nothing below (`termlog_verbosity` warn).
    log.warning(msg, extra={FIELDS: fields})
