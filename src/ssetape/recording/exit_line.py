"""The line a recorder prints when it stops: what its recording processes stored and lost
(`ssetape record`'s last line; `ssetape stats --runs` shows the same counts per run)."""

from __future__ import annotations

from ssetape.recording.link import RecordLink
from ssetape.recording.protocol import FinalCounts

__all__ = ["counts_line", "drain_note"]


def _n(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def counts_line(
    final: FinalCounts | None, link: RecordLink, note: str | None = None
) -> tuple[str | None, bool]:
    """One line with what was stored and lost, and whether anything was lost; ``note`` ends
    it (how the stop went: a drain, the exchanges it interrupted)."""
    line, warned = _counts(final, link)
    if note is None:
        return line, warned
    return (f"{line}; {note}" if line is not None else f"ssetape: {note}"), warned


def _counts(final: FinalCounts | None, link: RecordLink) -> tuple[str | None, bool]:
    if final is None:
        return (
            f"ssetape: the recording process did not report its counts; "
            f"{_n(link.lost_exchanges, 'exchange')} known lost (see the errors above)"
        ), True
    # Recording processes that died count with what they last reported; their
    # exchanges count once finished (those in flight are counted lost).
    retired = link.retired.totals()
    total = retired.plus(final)
    exchanges = final.exchanges_recorded + retired.exchanges_finished
    stored = f"{_n(total.events_recorded, 'event')} in {_n(exchanges, 'exchange')} stored"
    parts = [f"ssetape: {stored}"]
    bad = (
        total.events_lost
        or total.exchanges_lost
        or total.store_errors
        or total.capture_failures
        or link.restarts
    )
    if bad:
        lost = f"{_n(total.events_lost, 'event')} and {_n(total.exchanges_lost, 'exchange')}"
        parts.append(f"{lost} lost")
        if total.capture_failures:
            parts.append(f"{_n(total.capture_failures, 'stream')} not parsed")
        if total.store_errors:
            writes = _n(total.store_errors, "failed write")
            parts.append(f"{writes} (last: {final.last_error})")
        if link.restarts:
            parts.append(f"recording process restarted {_n(link.restarts, 'time')}")
    elif not final.active:
        return None, False  # beside the replayer, nothing was recorded: nothing to report
    else:
        parts.append("none lost")
    if not final.saved:
        parts.append(f"counts not saved to the store ({final.last_failure})")
    return ", ".join(parts), bool(bad) or not final.saved


def drain_note(ended: int, left: int, how: str, took: float, *, drained: bool = True) -> str | None:
    """How a stop went, for the end of the exit line: the exchanges in flight that ``ended``
    while it drained (``took`` seconds) and those ``left`` to be interrupted ``how``; None
    when nothing was in flight."""
    if not drained:
        return f"{_n(left, 'exchange')} in flight interrupted {how}" if left else None
    if not left:
        return f"drained {_n(ended, 'exchange')} in {took:.1f} s" if ended else None
    return f"drained {_n(ended, 'exchange')}, {_n(left, 'exchange')} interrupted {how}"
