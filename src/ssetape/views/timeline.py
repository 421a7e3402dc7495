"""When each event of a recorded stream arrived, drawn as a terminal chart or an SVG image.

Both pictures are drawn from per-cell counts made in one pass over the marks, so a stream of a
million events costs one short list of counts per lane, never an object per event per cell.
Event names and titles come from network traffic: the chart builds :class:`rich.text.Text`
(never markup); the SVG is drawn by :mod:`ssetape.views.timeline_svg`, which escapes every string.
"""

from __future__ import annotations

import heapq
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import orjson
from rich.console import Group, RenderableType
from rich.text import Text

__all__ = ["KINDS", "Mark", "Timeline"]

# Lane order, top down, follows a stream's life: set-up events, tokens, keep-alives, the end.
KINDS = ("meta", "content", "ping", "terminal", "error")
_TERMINAL = frozenset(
    {"response.completed", "response.incomplete", "message_stop", "image_generation.completed"}
)
# response.failed is also a terminal, but that it failed is what the picture has to say.
_ERROR = frozenset({"error", "response.failed"})
# A partial image is what an images stream's caller waits for, as the analyzer's TTFT counts it.
_CONTENT = frozenset({"content_block_delta", "image_generation.partial_image"})
_CHAT_CONTENT = ("content", "refusal", "reasoning", "reasoning_content", "tool_calls")
# kind -> (terminal style, SVG color)
_LOOK = {
    "meta": ("blue", "#2563eb"),
    "content": ("green", "#16a34a"),
    "ping": ("yellow", "#ca8a04"),
    "terminal": ("bold cyan", "#0891b2"),
    "error": ("bold red", "#dc2626"),
}
_OTHER_LOOK = ("white", "#374151")
_TTFT_STYLE, _TTFB_STYLE, _TTFT_COLOR, _TTFB_COLOR = "bold magenta", "yellow", "#c026d3", "#6b7280"
_LEGEND = "· 1  • 2-9  ● 10-99  █ 100+ events per cell"
_TOP_GAPS = 3
_LABEL_W = 9  # "terminal" and a space
# Characters a terminal would act on.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_S = 1_000_000
# Tick steps: 1-2-5 below a second, then the steps a clock is read in, up to a day.
_STEPS = (
    [m * 10**e for e in range(6) for m in (1, 2, 5)]
    + [s * _S for s in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800)]
    + [h * 3600 * _S for h in (6, 12, 24)]
)
_offset = attrgetter("offset_us")


@dataclass(frozen=True, slots=True)
class Mark:
    seq: int
    offset_us: int  # microseconds since the request was complete
    kind: str  # one of KINDS; anything else gets a lane of its own
    label: str  # event type, "message", or ":" for a comment


# (gap, then the seq, offset and kind of the event after it)
_Gap = tuple[int, int, int, str]


@dataclass(slots=True)
class _Scan:
    counts: dict[str, list[int]]  # kind -> events per cell
    gaps: list[_Gap]  # longest first


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


def _fmt_tick(us: int) -> str:
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


def _ticks(span: int, most: int) -> range:
    raw = span / max(1, most)
    step = next((s for s in _STEPS if s >= raw), None)
    if step is None:
        day = 86400 * _S
        step = math.ceil(raw / day) * day
    return range(0, span + 1, step)


def _clean(text: str, pattern: re.Pattern[str]) -> str:
    return pattern.sub("\ufffd", text)


def _kind_of_name(name: str) -> str | None:
    if name == "ping":
        return "ping"
    if name in _ERROR:
        return "error"
    if name in _TERMINAL:
        return "terminal"
    if name.endswith(".delta") or name in _CONTENT:
        return "content"
    return None


def _chat_kind(chunk: dict[str, Any]) -> str:
    if chunk.get("error") is not None:
        return "error"
    choices = chunk.get("choices")
    for choice in choices if isinstance(choices, list) else ():
        if not isinstance(choice, dict):
            continue
        if choice.get("finish_reason") == "error":
            return "error"
        delta = choice.get("delta")
        if isinstance(delta, dict) and any(delta.get(key) for key in _CHAT_CONTENT):
            return "content"
    return "meta"


def _classify(event: str | None, data: str | None, api: str | None) -> str:
    if data is None:
        return "ping"
    name = event if event and event != "message" else None
    if data.strip() == "[DONE]":
        return "terminal"
    if name is not None:
        kind = _kind_of_name(name)
        # Chat streams carry no event names; one that does is still read as a chunk.
        if kind is not None or api != "chat_completions":
            return kind or "meta"
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return "meta"
    if not isinstance(obj, dict):
        return "meta"
    if "choices" in obj or api == "chat_completions":
        return _chat_kind(obj)
    kind_name = obj.get("type")
    if isinstance(kind_name, str):
        return _kind_of_name(kind_name) or "meta"
    return "error" if obj.get("error") is not None else "meta"


class Timeline:
    """The arrival times of one exchange's events, ready to be drawn."""

    def __init__(
        self,
        marks: list[Mark],
        *,
        ttfb_us: int | None,
        ttft_us: int | None,
        duration_us: int | None,
        title: str = "",
    ) -> None:
        self.marks = marks
        self.ttfb_us = ttfb_us
        self.ttft_us = ttft_us
        self.duration_us = duration_us
        self.title = title
        end = max(0, duration_us or 0, ttfb_us or 0, ttft_us or 0)
        if marks:
            end = max(end, max(map(_offset, marks)))
        # A stream that took no measurable time still needs an axis to stand on.
        self.span_us: int = end if end > 0 else 1000

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

    def _scan(self, cells: int) -> _Scan:
        """Events per cell for each kind and the longest gaps, in one pass over the marks."""
        span = self.span_us
        counts: dict[str, list[int]] = {}
        top: list[_Gap] = []
        floor = 0
        prev = self.marks[0].offset_us if self.marks else 0
        last_kind: str | None = None
        row: list[int] = []
        # The hot loop of a million-event stream: the lane row is looked up only when the kind
        # changes, and a gap is only compared until it beats the shortest of the top few.
        for m in self.marks:
            off = m.offset_us
            kind = m.kind
            if kind is not last_kind:
                last_kind = kind
                row = counts.get(kind) or counts.setdefault(kind, [0] * cells)
            cell = off * cells // span
            if 0 <= cell < cells:
                row[cell] += 1
            else:
                row[cells - 1 if cell > 0 else 0] += 1
            if off - prev > floor:
                if len(top) < _TOP_GAPS:
                    heapq.heappush(top, (off - prev, m.seq, off, kind))
                else:
                    heapq.heapreplace(top, (off - prev, m.seq, off, kind))
                if len(top) == _TOP_GAPS:
                    floor = top[0][0]
            prev = off
        return _Scan(counts, sorted(top, key=lambda g: (-g[0], g[1])))

    def _lanes(self, scan: _Scan) -> list[str]:
        extra = sorted(k for k in scan.counts if k not in KINDS)
        return [k for k in KINDS if k in scan.counts] + extra

    def _stats(self) -> str:
        n = len(self.marks)
        parts = [f"{n:,} event" + ("" if n == 1 else "s")]
        values = (("duration", self.duration_us), ("TTFB", self.ttfb_us), ("TTFT", self.ttft_us))
        parts += [f"{name} {fmt_us(us)}" for name, us in values if us is not None]
        return " · ".join(parts)

    def _pauses(self, gaps: list[_Gap]) -> list[_Gap]:
        """The gaps worth calling out: those a 64-cell chart shows as an empty cell, else
        just the longest, so a steady stream does not list its ticks as pauses."""
        return [g for g in gaps if g[0] * 64 > self.span_us] or gaps[:1]

    @staticmethod
    def _gap_text(gaps: list[_Gap], width: int | None = None) -> str:
        """The gaps as a sentence; with ``width``, only as many as fit whole."""
        parts = [f"{fmt_us(g)} before #{seq} ({kind})" for g, seq, _, kind in gaps]
        while True:
            text = ("longest gaps: " if len(parts) > 1 else "longest gap: ") + ", ".join(parts)
            if width is None or len(text) <= width or len(parts) == 1:
                return text
            parts.pop()

    # Terminal -------------------------------------------------------------------------------

    def render(self, width: int = 80) -> RenderableType:
        """A chart for a terminal ``width`` columns wide (at least about 40 to be useful)."""
        lines = [self._header(width)]
        if not self.marks:
            lines.append(Text("empty stream: no events were recorded", style="italic"))
            return Group(*lines)
        count_w = len(f"{len(self.marks):,}")
        cells = max(10, width - _LABEL_W - 3 - count_w)
        scan = self._scan(cells)
        span = self.span_us

        def col(us: int) -> int:
            return min(cells - 1, max(0, us * cells // span))

        ttft_col = None if self.ttft_us is None else col(self.ttft_us)
        lines.extend(self._marker_rows(width, col))
        for kind in self._lanes(scan):
            row = scan.counts[kind]
            style = _LOOK.get(kind, _OTHER_LOOK)[0]
            line = Text(_clean(kind, _CONTROL)[: _LABEL_W - 1].ljust(_LABEL_W), style=style)
            line.append("│", style="dim")
            for i, n in enumerate(row):
                if n:
                    line.append(_glyph(n), style=style)
                else:
                    line.append("┊" if i == ttft_col else " ", style=_TTFT_STYLE)
            line.append("│", style="dim")
            line.append(f" {sum(row):>{count_w},}")
            lines.append(_fit(line, width))
        lines.extend(self._axis(cells, width))
        legend = f"{_LEGEND} of {fmt_us(math.ceil(span / cells))}"
        lines.append(_fit(Text(legend, style="dim"), width))
        if scan.gaps:
            gaps = self._pauses(scan.gaps)
            lines.append(_fit(Text(_clean(self._gap_text(gaps, width), _CONTROL)), width))
        return Group(*lines)

    def _header(self, width: int) -> Text:
        stats = self._stats()
        head = Text()
        title = _clean(self.title, _CONTROL)
        if title:
            room = width - len(stats) - 3
            if room >= 8:
                head.append(Text(title, style="bold"))
                head.truncate(room, overflow="ellipsis")
                head.append(" · ")
        head.append(stats)
        return _fit(head, width)

    def _marker_rows(self, width: int, col: Callable[[int], int]) -> list[Text]:
        """▼ TTFB and ▼ TTFT over their columns: one row when both labels fit, else two."""
        rows: list[list[tuple[int, str, str]]] = []
        for name, us, style in (
            ("TTFB", self.ttfb_us, _TTFB_STYLE),
            ("TTFT", self.ttft_us, _TTFT_STYLE),
        ):
            if us is None:
                continue
            at, label = _LABEL_W + 1 + col(us), f"{name} {fmt_us(us)}"
            # Near the right edge the label goes left of its arrow.
            text, begin = (
                (f"▼ {label}", at)
                if at + len(label) + 2 <= width
                else (f"{label} ▼", at - len(label) - 1)
            )
            begin = max(0, begin)
            if rows and all(b + len(t) < begin or begin + len(text) < b for b, t, _ in rows[-1]):
                rows[-1].append((begin, text, style))
            else:
                rows.append([(begin, text, style)])
        out = []
        for row in rows:
            line = Text()
            for begin, text, style in sorted(row):
                line.append(" " * (begin - len(line)))
                line.append(text, style=style)
            out.append(_fit(line, width))
        return out

    def _axis(self, cells: int, width: int) -> list[Text]:
        span = self.span_us
        chars = ["─"] * cells
        labels = [" "] * width
        end = -1
        for t in _ticks(span, cells // 10):
            c = t * cells // span
            if c >= cells:
                continue
            chars[c] = "┬"
            label = _fmt_tick(t)
            at = _LABEL_W + 1 + c
            if at + len(label) > width:
                at = width - len(label)
            if at > end + 1:
                labels[at : at + len(label)] = label
                end = at + len(label)
        axis = Text(" " * _LABEL_W + "└" + "".join(chars) + "┘", style="dim")
        return [_fit(axis, width), _fit(Text("".join(labels).rstrip(), style="dim"), width)]

    # SVG ------------------------------------------------------------------------------------

    def svg(self, width_px: int = 900) -> str:
        """A standalone SVG document; one mark per event, or per pixel column past 5000."""
        # Imported here: ssetape.views.timeline_svg builds on this module.
        from ssetape.views.timeline_svg import TimelineSvg

        return TimelineSvg(self).render(width_px)


def _glyph(n: int) -> str:
    return "█" if n >= 100 else "●" if n >= 10 else "•" if n >= 2 else "·"


def _fit(text: Text, width: int) -> Text:
    """Crop rather than wrap: a wrapped chart row lands in the wrong lane."""
    text.no_wrap = True
    text.overflow = "crop"
    text.truncate(width, overflow="ellipsis")
    return text
