"""Each exchange as the store holds it, for the proxy's metrics: the recording process's side.

When the writer has committed an exchange's end and its analysis, the recording process
reports it (``Report.STORED``, a :class:`~ssetape.recording.protocol.StoredExchange`) with the
very values it just saved: the transport's (state, status, duration) as the proxy sent them,
the analysis' (api, model, outcome, fault, TTFT, usage) bounded as ``Knowledge`` bounds them,
and the gaps between its content events (docs/FIGURES.md), taken from the same content-event
offsets as the stored gap figures, counted per bucket here so that a million-event stream
costs the proxy a few numbers. The proxy (``ssetape.telemetry``) only adds them up.

With them go what an exchange's span needs (``ssetape record --otlp``): its uid, start, TTFB,
finish reason, findings and stalls; its prompt and output text only under the GenAI
conventions' content-capture opt-in (``ssetape.recording.content_capture``).
"""

from __future__ import annotations

import datetime as dt
import heapq
import itertools
import threading
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ssetape.analysis.analyzer import Analysis
from ssetape.analysis.bounds import bounded
from ssetape.recording.content_capture import capture_content, clipped
from ssetape.recording.protocol import StoredExchange, StoreWrites
from ssetape.storage.write_times import WriteTimes

__all__ = [
    "BOUNDS_S", "BOUNDS_US", "MAX_STALLS", "STALL_US", "StoreWork", "StoredFigures", "binned",
    "epoch_us", "stalls_of",
]  # fmt: skip

# The OpenTelemetry GenAI conventions' bucket boundaries for the operation duration, the time
# to first chunk and the time per output chunk (seconds).
BOUNDS_S = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
BOUNDS_US = tuple(round(b * 1_000_000) for b in BOUNDS_S)
# Exchanges ended and not yet reported: one the writer never commits (dropped) must not
# stay for ever; the oldest go (as LiveAnalysis bounds its finished analyses).
MAX_WAITING = 10_000
# A stall: a gap between content events (docs/FIGURES.md) of a second or more, the pause MCP's
# find_stalls looks for by default. A span tells the longest MAX_STALLS of them, and how many.
STALL_US = 1_000_000
MAX_STALLS = 20
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def binned(offsets: array[int] | None) -> tuple[list[int], int]:
    """The gaps between consecutive offsets, counted per bucket of BOUNDS_US (a bucket holds
    the gaps up to its bound, inclusive, as Prometheus' ``le``), and their sum."""
    counts = [0] * (len(BOUNDS_US) + 1)
    if offsets is None or len(offsets) < 2:
        return counts, 0
    for a, b in itertools.pairwise(offsets):
        counts[bisect_left(BOUNDS_US, b - a)] += 1
    return counts, offsets[-1] - offsets[0]


def stalls_of(gaps: Iterable[tuple[int, int]]) -> tuple[list[list[int]], int]:
    """Of (start offset, length) gaps, the stalls: the longest MAX_STALLS as [start, length] in
    the stream's order (the earlier of equal ones), and how many there were."""
    count, longest = 0, list[tuple[int, int, int]]()
    for start, us in gaps:
        if us >= STALL_US:
            count += 1
            heapq.heappush(longest, (us, -start, start))
            if len(longest) > MAX_STALLS:
                heapq.heappop(longest)
    return sorted([start, us] for us, _, start in longest), count


def _gaps(offsets: array[int] | None) -> Iterable[tuple[int, int]]:
    return ((a, b - a) for a, b in itertools.pairwise(offsets or ()))


def epoch_us(when: dt.datetime) -> int:
    """A stored time (UTC) in microseconds since the Unix epoch, exactly."""
    return (when.astimezone(dt.UTC) - _EPOCH) // dt.timedelta(microseconds=1)


@dataclass(slots=True)
class _Transport:
    host: str
    port: int | None
    uid: str = ""
    started_us: int | None = None
    status: int | None = None
    ttfb_us: int | None = None
    stream: bool | None = None
    state: str = ""
    duration_us: int | None = None
    analysis: Analysis | None = None
    offsets: array[int] | None = None


class StoredFigures:
    """What the recording process knows of each exchange until the store has it all.

    ``take_timed``: an exchange's live analysis and its content events' offsets (by uid,
    once: ``LiveAnalysis.take_timed``)."""

    def __init__(self, take_timed: Callable[[str], tuple[Analysis, array[int]] | None]) -> None:
        self._take_timed = take_timed
        # The proxy's environment, inherited: read once, as the proxy reads it.
        self.content = capture_content()
        self._open: dict[str, _Transport] = {}  # the main thread's
        # Ended (the main thread adds), stored (the writer's thread takes): under the lock.
        self._ended: dict[str, _Transport] = {}
        self._lock = threading.Lock()

    def begin(self, uid: str, fields: dict[str, Any]) -> None:
        started = fields.get("started_at")
        self._open[uid] = _Transport(
            str(fields.get("host") or ""), fields.get("port"), uid,
            epoch_us(started) if isinstance(started, dt.datetime) else None,
        )  # fmt: skip

    def update(self, uid: str, fields: dict[str, Any]) -> None:
        t = self._open.get(uid)
        if t is not None and "status" in fields:
            t.status = fields["status"]
            t.ttfb_us, t.stream = fields.get("ttfb_us"), fields.get("is_stream")

    def finish(self, uid: str, fields: dict[str, Any]) -> None:
        """Its end as it goes to the writer (after the recording process's own notes)."""
        t = self._open.pop(uid, None)
        if t is None:
            return
        t.state, t.duration_us = fields["state"], fields.get("duration_us")
        with self._lock:
            while len(self._ended) >= MAX_WAITING:
                self._ended.pop(next(iter(self._ended)))
            self._ended[uid] = t

    def take(self, uid: str) -> Analysis | None:
        """For ``Knowledge``: the live analysis it saves, kept here for the report."""
        timed = self._take_timed(uid)
        with self._lock:
            t = self._ended.get(uid)
        if t is not None and timed is not None:
            t.analysis, t.offsets = timed
        return timed[0] if timed is not None else None

    def stored(self, uids: list[str], *, analysed: bool) -> list[StoredExchange]:
        """The exchanges whose end was committed, and whose analysis too if ``analysed``."""
        with self._lock:
            ended = [t for uid in uids if (t := self._ended.pop(uid, None)) is not None]
        return [_figures(t, t.analysis if analysed else None, self.content) for t in ended]


def _figures(t: _Transport, analysis: Analysis | None, content: bool) -> StoredExchange:
    if analysis is None:  # the store holds its transport only: no outcome, no fault
        return StoredExchange(
            None, None, None, None, t.status, t.state, t.host, t.port, t.duration_us,
            None, None, None, *binned(None), uid=t.uid, started_us=t.started_us,
            ttfb_us=t.ttfb_us, stream=t.stream,
        )  # fmt: skip
    a, _ = bounded(analysis)  # as Knowledge stores it
    # Read again only when its longest gap says a stall is there.
    stalled = (a.gap_max_us or 0) >= STALL_US
    stalls, count = stalls_of(_gaps(t.offsets)) if stalled else ([], 0)
    return StoredExchange(
        a.api, a.model, a.outcome, a.fault, t.status, t.state, t.host, t.port, t.duration_us,
        a.ttft_us, a.input_tokens, a.output_tokens, *binned(t.offsets), uid=t.uid,
        started_us=t.started_us, ttfb_us=t.ttfb_us, stream=t.stream, gap_max_us=a.gap_max_us,
        reason=a.reason, findings=len(a.findings), stalls=stalls, stall_count=count,
        request_text=clipped(a.request_text) if content else None,
        output_text=clipped(a.output_text) if content else None,
    )  # fmt: skip


class StoreWork:
    """What the store did, for ``Report.WRITES``: its writer's transactions, timed by
    ``times``, and the streamed bytes this process took (added by its main thread)."""

    def __init__(self, times: WriteTimes) -> None:
        self.times = times
        self.stream_bytes = 0
        self._told = 0

    def report(self, queued: int) -> StoreWrites:
        """Since the last report (one thread reports): ``queued``, the writer's queue now."""
        took, self._told = self.stream_bytes - self._told, self.stream_bytes
        return StoreWrites(self.times.take(), queued, took)
