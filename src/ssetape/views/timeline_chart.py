"""A :class:`~ssetape.views.timeline.Timeline` drawn for a terminal, as rich text.

Event names and titles come from network traffic: the chart builds :class:`rich.text.Text`
(never markup) and replaces control characters.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from rich.console import Group, RenderableType
from rich.text import Text

from ssetape.views.timeline import (
    CONTROL,
    LOOK,
    OTHER_LOOK,
    TTFB_STYLE,
    TTFT_STYLE,
    Timeline,
    clean,
    fmt_tick,
    fmt_us,
    ticks,
)

__all__ = [
    "TimelineChart",
    "axis_lines",
    "fit",
    "glyph",
    "header_line",
]

_LEGEND = "· 1  • 2-9  ● 10-99  █ 100+ events per cell"
_LABEL_W = 9  # "terminal" and a space


class TimelineChart:
    """The terminal picture of one :class:`~ssetape.views.timeline.Timeline`."""

    def __init__(self, timeline: Timeline) -> None:
        self.timeline = timeline

    def render(self, width: int = 80) -> RenderableType:
        """A chart for a terminal ``width`` columns wide (at least about 40 to be useful)."""
        tl = self.timeline
        lines = [self._header(width)]
        if not tl.marks:
            lines.append(Text("empty stream: no events were recorded", style="italic"))
            return Group(*lines)
        count_w = len(f"{len(tl.marks):,}")
        cells = max(10, width - _LABEL_W - 3 - count_w)
        scan = tl.scan(cells)
        span = tl.span_us

        def col(us: int) -> int:
            return min(cells - 1, max(0, us * cells // span))

        ttft_col = None if tl.ttft_us is None else col(tl.ttft_us)
        lines.extend(self._marker_rows(width, col))
        for kind in tl.lanes(scan):
            row = scan.counts[kind]
            style = LOOK.get(kind, OTHER_LOOK)[0]
            line = Text(clean(kind, CONTROL)[: _LABEL_W - 1].ljust(_LABEL_W), style=style)
            line.append("│", style="dim")
            for i, n in enumerate(row):
                if n:
                    line.append(glyph(n), style=style)
                else:
                    line.append("┊" if i == ttft_col else " ", style=TTFT_STYLE)
            line.append("│", style="dim")
            line.append(f" {sum(row):>{count_w},}")
            lines.append(fit(line, width))
        lines.extend(self._axis(cells, width))
        legend = f"{_LEGEND} of {fmt_us(math.ceil(span / cells))}"
        lines.append(fit(Text(legend, style="dim"), width))
        if scan.gaps:
            gaps = tl.pauses(scan.gaps)
            lines.append(fit(Text(clean(tl.gap_text(gaps, width), CONTROL)), width))
        return Group(*lines)

    def _header(self, width: int) -> Text:
        return header_line(self.timeline.title, self.timeline.summary(), width)

    def _marker_rows(self, width: int, col: Callable[[int], int]) -> list[Text]:
        """▼ TTFB and ▼ TTFT over their columns: one row when both labels fit, else two."""
        tl = self.timeline
        rows: list[list[tuple[int, str, str]]] = []
        for name, us, style in (
            ("TTFB", tl.ttfb_us, TTFB_STYLE),
            ("TTFT", tl.ttft_us, TTFT_STYLE),
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
            out.append(fit(line, width))
        return out

    def _axis(self, cells: int, width: int) -> list[Text]:
        return axis_lines(self.timeline.span_us, cells, width)


def header_line(title: str, stats: str, width: int) -> Text:
    """A chart's first line: its title (control characters shown, cut to fit), then its
    figures; the title is left out where fewer than 8 columns would show of it."""
    head = Text()
    shown = clean(title, CONTROL)
    room = width - len(stats) - 3
    if shown and room >= 8:
        head.append(Text(shown, style="bold"))
        head.truncate(room, overflow="ellipsis")
        head.append(" · ")
    head.append(stats)
    return fit(head, width)


def axis_lines(span_us: int, cells: int, width: int) -> list[Text]:
    """The time axis under ``cells`` columns spanning ``span_us``, and its tick labels."""
    chars = ["─"] * cells
    labels = [" "] * width
    end = -1
    for t in ticks(span_us, cells // 10):
        c = t * cells // span_us
        if c >= cells:
            continue
        chars[c] = "┬"
        label = fmt_tick(t)
        at = min(_LABEL_W + 1 + c, width - len(label))
        if at > end + 1:
            labels[at : at + len(label)] = label
            end = at + len(label)
    axis = Text(" " * _LABEL_W + "└" + "".join(chars) + "┘", style="dim")
    return [fit(axis, width), fit(Text("".join(labels).rstrip(), style="dim"), width)]


def glyph(n: int) -> str:
    return "█" if n >= 100 else "●" if n >= 10 else "•" if n >= 2 else "·"


def fit(text: Text, width: int) -> Text:
    """Crop rather than wrap: a wrapped chart row lands in the wrong lane."""
    text.no_wrap = True
    text.overflow = "crop"
    text.truncate(width, overflow="ellipsis")
    return text
