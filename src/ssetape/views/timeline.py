"""When each event of a recorded stream arrived: what the terminal chart and the SVG draw.

Both pictures (:mod:`ssetape.views.timeline_chart`, :mod:`ssetape.views.timeline_svg`) are
drawn from per-cell counts made here in one pass over the marks, so a stream of a million
events costs one short list of counts per lane, never an object per event per cell. Event
names and titles come from network traffic: both pictures escape every string they draw.
"""

from __future__ import annotations

import heapq
import math
import re
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from operator import attrgetter
from typing import NamedTuple

import orjson

from ssetape.analysis.api_rules import ApiRules
from ssetape.analysis.apis import APIS, api_of_event
from ssetape.analysis.content_events import ContentEvents
from ssetape.storage.models import Exchange
from ssetape.storage.queries import Queries
from ssetape.storage.turns import TurnReads
from ssetape.views.documents import url_of
from ssetape.vocabulary import Direction, Transport

__all__ = ["KINDS", "Mark", "Timeline"]

# Lane order, top down, follows a stream's life: set-up events, tokens, keep-alives, the end.
KINDS = ("meta", "content", "ping", "terminal", "error")
# kind -> (terminal style, SVG color)
LOOK = {
    "meta": ("blue", "#2563eb"),
    "content": ("green", "#16a34a"),
    "ping": ("yellow", "#ca8a04"),
    "terminal": ("bold cyan", "#0891b2"),
    "error": ("bold red", "#dc2626"),
}
OTHER_LOOK = ("white", "#374151")
TTFT_STYLE, TTFB_STYLE, TTFT_COLOR, TTFB_COLOR = "bold magenta", "yellow", "#c026d3", "#6b7280"
_TOP_GAPS = 3
# Characters a terminal would act on.
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_S = 1_000_000
# Tick steps: 1-2-5 below a second, then the steps a clock is read in, up to a day.
_STEPS = (
    [m * 10**e for e in range(6) for m in (1, 2, 5)]
    + [s * _S for s in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800)]
    + [h * 3600 * _S for h in (6, 12, 24)]
)
_offset = attrgetter("offset_us")


class Mark(NamedTuple):
    """One event on the time axis. (A tuple: a long stream makes one per event, each time it
    is drawn, and a tuple is made in a third of a frozen dataclass's time.)"""

    seq: int
    offset_us: int  # microseconds since the request was complete
    kind: str  # one of KINDS; anything else gets a lane of its own
    label: str  # event type, "message", or ":" for a comment


class _StoredMarks(Collection[Mark]):
    """An exchange's marks, made from its stored events as they are read: a million-event
    stream is never a million marks in memory."""

    def __init__(self, queries: Queries, x: Exchange, count: int) -> None:
        self._queries, self._x, self._count = queries, x, count

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[Mark]:
        label = Timeline.label_of
        for seq, offset_us, kind, event, data in self._kinds():
            yield Mark(seq, offset_us, kind, label(event, data))

    def points(self) -> Iterator[tuple[int, int, str]]:
        """(seq, offset_us, kind) of each mark: what a scan counts, with no label made."""
        for seq, offset_us, kind, _, _ in self._kinds():
            yield seq, offset_us, kind

    def _kinds(self) -> Iterator[tuple[int, int, str, str | None, str | None]]:
        """Each event's kind. The content lane is what the analysis counted as content, so
        the gaps a chart lists are those of the stored figures (analysis.content_events);
        an event the names alone would call content but that carried none is set-up."""
        if self._x.transport == Transport.WEBSOCKET:
            # A session's two lanes, client above server (views.ws_timeline draws its turns).
            for m in TurnReads(self._queries.store).messages(self._x.id):
                lane = Direction.CLIENT if m.direction == Direction.CLIENT else Direction.SERVER
                yield m.seq, m.offset_us, str(lane), m.event, m.data
            return
        classify = _classifier(self._x.api)
        for e in ContentEvents.read(self._queries, self._x):
            kind = "content" if e.content else classify(e.event, e.data)
            if kind == "content" and not e.content:
                kind = "meta"
            yield e.seq, e.offset_us, kind, e.event, e.data

    def __contains__(self, item: object) -> bool:
        return any(m == item for m in self)


# (gap, then the seq, offset and kind of the event after it)
Gap = tuple[int, int, int, str]


@dataclass(slots=True)
class Scan:
    counts: dict[str, list[int]]  # kind -> events per cell
    gaps: list[Gap]  # longest first


def fmt_us(us: int) -> str:
    """A duration as people read it, precise enough for a bug report."""
    # Each unit stops where its rounding would print the next unit's first value (1000 ms).
    if us < 1000:
        return f"{us} µs"
    if us < 999_500:
        ms = us / 1000
        return f"{ms:.0f} ms" if ms >= 99.5 else f"{ms:.1f} ms" if ms >= 9.995 else f"{ms:.2f} ms"
    if us < 59_995_000:
        return f"{us / _S:.2f} s"
    if us < 3_599_950_000:
        minutes, tenths = divmod(round(us / 100_000), 600)
        return f"{minutes}m{tenths / 10:04.1f}s"
    minutes, sec = divmod(round(us / _S), 60)
    return f"{minutes // 60}h{minutes % 60:02d}m{sec:02d}s"


def fmt_tick(us: int) -> str:
    """A tick label: ticks are round, so the shortest form that names them exactly."""
    if us == 0:
        return "0"
    if us < 1000:
        return f"{us} µs"
    if us < _S:
        return f"{us / 1000:g} ms"
    if us < 60 * _S:
        return f"{us / _S:g} s"
    sec = us // _S
    if sec < 3600:
        return f"{sec // 60}m" + (f"{sec % 60}s" if sec % 60 else "")
    return f"{sec // 3600}h" + (f"{sec % 3600 // 60}m" if sec % 3600 else "")


def ticks(span: int, most: int) -> range:
    raw = span / max(1, most)
    step = next((s for s in _STEPS if s >= raw), None)
    if step is None:
        day = 86400 * _S
        step = math.ceil(raw / day) * day
    return range(0, span + 1, step)


def clean(text: str, pattern: re.Pattern[str]) -> str:
    return pattern.sub("\ufffd", text)


# Event types of every known API, for streams whose API is unknown.
_TERMINAL = frozenset().union(*(r.terminal_events for r in APIS.values()))
_ERROR = frozenset().union(*(r.error_events for r in APIS.values()))
_CONTENT = frozenset().union(*(r.content_events for r in APIS.values()))


def _kind_of_name(name: str, rules: ApiRules | None) -> str | None:
    if name == "ping":
        return "ping"
    if name in (rules.error_events if rules else _ERROR):
        return "error"
    if name in (rules.terminal_events if rules else _TERMINAL):
        return "terminal"
    if name.endswith(".delta") or name in (rules.content_events if rules else _CONTENT):
        return "content"
    return None


def _classify(event: str | None, data: str | None, api: str | None) -> str:
    if data is None:
        return "ping"
    name = event if event and event != "message" else None
    if data.strip() == "[DONE]":
        return "terminal"
    rules = APIS.get(api or "")
    if name is not None:
        kind = _kind_of_name(name, rules)
        # Chat streams carry no event names; one that does is still read as a chunk.
        if kind is not None or rules is None or rules.typed_events:
            return kind or "meta"
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return "meta"
    if not isinstance(obj, dict):
        return "meta"
    if rules is None:  # which API sends this kind of payload?
        rules = APIS.get(api_of_event(None, obj))
    if rules is not None and rules.payload_kind is not None:
        return rules.payload_kind(obj)
    kind_name = obj.get("type")
    if isinstance(kind_name, str):
        return _kind_of_name(kind_name, rules) or "meta"
    return "error" if obj.get("error") is not None else "meta"


def _classifier(api: str | None) -> Callable[[str | None, str | None], str]:
    """:meth:`Timeline.classify` for the events of one exchange of ``api``, the same answer
    for every event, in less time per event where it can be: the stream of an API whose
    payloads tell their kind (chat chunks carry no event name) is one JSON parse and one
    look per event, with no generic dispatch in between."""
    rules = APIS.get(api or "")
    payload_kind = rules.payload_kind if rules is not None and not rules.typed_events else None
    if payload_kind is None:
        return lambda event, data: Timeline.classify(event, data, api)
    loads, error = orjson.loads, orjson.JSONDecodeError

    def kind(event: str | None, data: str | None) -> str:
        if data is None:
            return "ping"
        if event and event != "message":  # named: as classify reads names
            return Timeline.classify(event, data, api)
        try:
            obj = loads(data)
        except error:
            return "terminal" if data.strip() == "[DONE]" else "meta"
        if not isinstance(obj, dict):
            return "meta"
        try:
            return payload_kind(obj)
        except Exception:  # never raises, as classify
            return "meta"

    return kind


class Timeline:
    """The arrival times of one exchange's events, ready to be drawn."""

    def __init__(
        self,
        marks: Collection[Mark],
        *,
        ttfb_us: int | None,
        ttft_us: int | None,
        duration_us: int | None,
        title: str = "",
        last_us: int | None = None,
    ) -> None:
        """``marks``: a list, or a collection read anew each time it is iterated (the
        store's, a page at a time); ``last_us``, the latest of their offsets, if known."""
        self.marks = marks
        self.ttfb_us = ttfb_us
        self.ttft_us = ttft_us
        self.duration_us = duration_us
        self.title = title
        end = max(0, duration_us or 0, ttfb_us or 0, ttft_us or 0)
        if last_us is None and marks:
            last_us = max(map(_offset, marks))
        end = max(end, last_us or 0)
        # A stream that took no measurable time still needs an axis to stand on.
        self.span_us: int = end if end > 0 else 1000

    @classmethod
    def of(cls, x: Exchange, queries: Queries) -> Timeline:
        """The timeline of one stored exchange, for `ssetape show --timeline/--svg`: its
        events are read from the store a page at a time, each time they are drawn."""
        span = queries.event_span(x.id)
        title = f"#{x.id} {x.method} {url_of(x)} {x.model or ''} {x.outcome or x.state}"
        return cls(
            _StoredMarks(queries, x, span.count), ttfb_us=x.ttfb_us, ttft_us=x.ttft_us,
            duration_us=x.duration_us, title=title, last_us=span.last_offset_us,
        )  # fmt: skip

    # Classification -------------------------------------------------------------------------

    @staticmethod
    def classify(event: str | None, data: str | None, api: str | None) -> str:
        """A best-effort kind for one stored event (``data`` None: a comment); never raises."""
        try:
            return _classify(event, data, api)
        except Exception:
            return "meta"

    @staticmethod
    def label_of(event: str | None, data: str | None) -> str:
        """The label a stored event is shown with: its name, ``[DONE]``, or ``:`` for a comment."""
        if data is None:
            return ":"
        if event and event != "message":
            return event
        return "[DONE]" if data.strip() == "[DONE]" else "message"

    # Shared ---------------------------------------------------------------------------------

    def scan(self, cells: int) -> Scan:
        """Events per cell for each kind and the longest gaps between content events, in one
        pass over the marks."""
        span = self.span_us
        counts: dict[str, list[int]] = {}
        top: list[Gap] = []
        floor = 0
        prev: int | None = None  # the first event follows no gap
        last_kind: str | None = None
        row: list[int] = []
        marks = self.marks
        points = (
            marks.points()
            if isinstance(marks, _StoredMarks)
            else ((m.seq, m.offset_us, m.kind) for m in marks)
        )
        # The hot loop of a million-event stream: the lane row is looked up only when the kind
        # changes, and a gap is only compared until it beats the shortest of the top few.
        for seq, off, kind in points:
            if kind is not last_kind:
                last_kind = kind
                row = counts.get(kind) or counts.setdefault(kind, [0] * cells)
            cell = off * cells // span
            if 0 <= cell < cells:
                row[cell] += 1
            else:
                row[cells - 1 if cell > 0 else 0] += 1
            # Gaps are between content events only (analysis.content_events): keep-alives
            # and set-up events in a pause do not cut it into shorter ones.
            if kind != "content":
                continue
            if prev is None:
                prev = off
            if off - prev > floor:
                if len(top) < _TOP_GAPS:
                    heapq.heappush(top, (off - prev, seq, off, kind))
                else:
                    heapq.heapreplace(top, (off - prev, seq, off, kind))
                if len(top) == _TOP_GAPS:
                    floor = top[0][0]
            prev = off
        return Scan(counts, sorted(top, key=lambda g: (-g[0], g[1])))

    def lanes(self, scan: Scan) -> list[str]:
        extra = sorted(k for k in scan.counts if k not in KINDS)
        return [k for k in KINDS if k in scan.counts] + extra

    def summary(self) -> str:
        n = len(self.marks)
        parts = [f"{n:,} event" + ("" if n == 1 else "s")]
        values = (("duration", self.duration_us), ("TTFB", self.ttfb_us), ("TTFT", self.ttft_us))
        parts += [f"{name} {fmt_us(us)}" for name, us in values if us is not None]
        return " · ".join(parts)

    def pauses(self, gaps: list[Gap]) -> list[Gap]:
        """The gaps worth calling out: those a 64-cell chart shows as an empty cell, else
        just the longest, so a steady stream does not list its ticks as pauses."""
        return [g for g in gaps if g[0] * 64 > self.span_us] or gaps[:1]

    @staticmethod
    def gap_text(gaps: list[Gap], width: int | None = None) -> str:
        """The gaps as a sentence; with ``width``, only as many as fit whole."""
        parts = [f"{fmt_us(g)} before #{seq} ({kind})" for g, seq, _, kind in gaps]
        while True:
            text = ("longest gaps: " if len(parts) > 1 else "longest gap: ") + ", ".join(parts)
            if width is None or len(text) <= width or len(parts) == 1:
                return text
            parts.pop()
