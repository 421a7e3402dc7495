"""The stats page's charts, drawn on the server as inline SVG: latency distributions per group
and requests and errors over time.

Inline SVG needs no script and no style attribute (presentation attributes are not styles), so
the pages stay under the strict Content-Security-Policy. Every label is built with
:func:`ssetape.web.html.el`, which escapes it: group names are recorded strings.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from ssetape.views.timeline import fmt_tick, fmt_us, ticks
from ssetape.web.html import Markup, el, join

__all__ = ["Bucket", "Spread", "distribution_chart", "svg", "time_chart"]

WIDTH = 1000
_LEFT, _RIGHT, _ROW, _TOP = 200, 300, 26, 12
_LABEL_MAX = 22  # characters of a group's name: the whole is in the row's tooltip
_BOX, _WHISKER, _MEDIAN = "#93c5fd", "#6b7280", "#1d4ed8"
_REQUESTS, _ERRORS = "#cbd5e1", "#dc2626"


@dataclass(frozen=True, slots=True)
class Spread:
    """One group's values (microseconds): how many, and where they lie."""

    group: str
    n: int
    low: int
    p50: int
    p95: int
    high: int


@dataclass(frozen=True, slots=True)
class Bucket:
    """Exchanges started in [start, start + step)."""

    start: dt.datetime
    requests: int
    errors: int


def svg(height: int, *body: object, label: str, width: int = WIDTH, **attrs: str) -> Markup:
    """An inline SVG chart of the viewer: ``label`` is its title (what a screen reader says)."""
    return el(
        "svg",
        el("title", label),
        *body,
        xmlns="http://www.w3.org/2000/svg",
        width=width,
        height=height,
        viewBox=f"0 0 {width} {height}",
        font_size="12",
        role="img",
        class_="chart",
        **attrs,
    )


def _short(text: str) -> str:
    return text if len(text) <= _LABEL_MAX else text[: _LABEL_MAX - 1] + "…"


def distribution_chart(spreads: Sequence[Spread], what: str) -> Markup:
    """One row per group on one linear axis: a line from the lowest to the highest value, a box
    from p50 to p95, a bold tick at p50; the figures to the right."""
    if not spreads:
        return el("p", f"no {what} measured", class_="dim")
    top = max(s.high for s in spreads) or 1
    plot = WIDTH - _LEFT - _RIGHT

    def x(us: int) -> float:
        return round(_LEFT + us / top * plot, 1)

    rows: list[Markup] = []
    for i, s in enumerate(spreads):
        y = _TOP + i * _ROW
        mid = y + _ROW / 2
        tip = (
            f"{s.group}: {what} of {s.n:,} exchanges: lowest {fmt_us(s.low)}, p50 "
            f"{fmt_us(s.p50)}, p95 {fmt_us(s.p95)}, highest {fmt_us(s.high)}"
        )
        rows.append(
            el(
                "g",
                el("title", tip),
                el("text", _short(s.group), x=_LEFT - 8, y=mid + 4, text_anchor="end"),
                el("line", x1=x(s.low), x2=x(s.high), y1=mid, y2=mid, stroke=_WHISKER),
                el("line", x1=x(s.high), x2=x(s.high), y1=mid - 5, y2=mid + 5, stroke=_WHISKER),
                el(
                    "rect",
                    x=x(s.p50),
                    y=mid - 7,
                    width=max(1.0, round(x(s.p95) - x(s.p50), 1)),
                    height=14,
                    fill=_BOX,
                ),
                el(
                    "line",
                    x1=x(s.p50),
                    x2=x(s.p50),
                    y1=mid - 8,
                    y2=mid + 8,
                    stroke=_MEDIAN,
                    stroke_width=3,
                ),
                el(
                    "text",
                    f"p50 {fmt_us(s.p50)} · p95 {fmt_us(s.p95)} · max {fmt_us(s.high)}",
                    x=WIDTH - _RIGHT + 10,
                    y=mid + 4,
                ),
                class_="spread",
                data_group=s.group,
            )
        )
    axis_y = _TOP + len(spreads) * _ROW + 4
    steps = ticks(top, plot // 90)
    axis = [
        el("line", x1=_LEFT, x2=_LEFT + plot, y1=axis_y, y2=axis_y, stroke="#111827"),
        *(el("line", x1=x(t), x2=x(t), y1=axis_y, y2=axis_y + 5, stroke="#111827") for t in steps),
        *(
            el("text", fmt_tick(t), x=x(t), y=axis_y + 18, text_anchor="middle", fill="#374151")
            for t in steps
        ),
    ]
    return svg(axis_y + 26, *rows, join(axis), label=f"{what} per group")


def time_chart(buckets: Sequence[Bucket], step: dt.timedelta) -> Markup:
    """Requests (grey) and errors (red, in front) per bucket of time, as bars."""
    if not buckets:
        return el("p", "no exchanges", class_="dim")
    height, top, bottom, left = 196, 14, 150, 50
    plot = WIDTH - left - 20
    most = max(b.requests for b in buckets) or 1
    bar = plot / len(buckets)

    def h(n: int) -> float:
        return round(n / most * (bottom - top), 1)

    bars: list[Markup] = []
    for i, b in enumerate(buckets):
        x0 = round(left + i * bar + bar * 0.1, 1)
        w = max(1.0, round(bar * 0.8, 1))
        when = b.start.strftime("%Y-%m-%d %H:%M:%S")
        tip = f"{when} UTC (+{_span(step)}): {b.requests:,} exchanges, {b.errors:,} failed"
        bars.append(
            el(
                "g",
                el("title", tip),
                el(
                    "rect",
                    x=x0,
                    y=bottom - h(b.requests),
                    width=w,
                    height=h(b.requests),
                    fill=_REQUESTS,
                ),
                el("rect", x=x0, y=bottom - h(b.errors), width=w, height=h(b.errors), fill=_ERRORS)
                if b.errors
                else "",
                class_="bucket",
                data_requests=b.requests,
                data_errors=b.errors,
            )
        )
    labels = [
        el("text", f"{most:,}", x=left - 6, y=top + 4, text_anchor="end"),
        el("text", "0", x=left - 6, y=bottom + 4, text_anchor="end"),
        el("line", x1=left, x2=left + plot, y1=bottom, y2=bottom, stroke="#111827"),
    ]
    every = max(1, len(buckets) // 6)
    for i in range(0, len(buckets), every):
        at = round(left + (i + 0.5) * bar, 1)
        label = buckets[i].start.strftime(
            "%m-%d %H:%M" if step >= dt.timedelta(minutes=1) else "%H:%M:%S"
        )
        labels.append(el("text", label, x=at, y=bottom + 18, text_anchor="middle", fill="#374151"))
    legend = el(
        "text",
        f"exchanges (grey) and failed ones (red) per {_span(step)}",
        x=left,
        y=height - 4,
        fill="#374151",
    )
    return svg(height, *bars, join(labels), legend, label="exchanges and failures over time")


def _span(step: dt.timedelta) -> str:
    return fmt_tick(int(step.total_seconds() * 1_000_000))
