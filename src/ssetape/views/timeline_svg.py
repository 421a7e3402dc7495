"""A :class:`~ssetape.views.timeline.Timeline` drawn as a standalone SVG image, for a bug report.

It is drawn from the same per-cell counts as the terminal chart, one cell per pixel column.
Event names and titles come from network traffic, so every string is escaped.
"""

from __future__ import annotations

import math
import re
from xml.sax.saxutils import escape

from ssetape.views.timeline import (
    LOOK,
    OTHER_LOOK,
    TTFB_COLOR,
    TTFT_COLOR,
    Timeline,
    clean,
    fmt_tick,
    fmt_us,
    ticks,
)

__all__ = ["TimelineSvg"]

_SVG_MAX_MARKS = 5000
_SVG_LEFT, _SVG_RIGHT, _SVG_TOP, _SVG_LANE = 90, 80, 84, 22
# Characters XML 1.0 forbids even when escaped.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


class TimelineSvg:
    """The SVG picture of one :class:`~ssetape.views.timeline.Timeline`."""

    def __init__(self, timeline: Timeline) -> None:
        self.timeline = timeline

    def render(self, width_px: int = 900) -> str:
        """A standalone SVG document; one mark per event, or per pixel column past 5000."""
        tl = self.timeline
        width_px = max(width_px, 400)
        plot_w = width_px - _SVG_LEFT - _SVG_RIGHT
        scan = tl.scan(plot_w)
        span, lanes, n = tl.span_us, tl.lanes(scan), len(tl.marks)
        axis_y = _SVG_TOP + len(lanes) * _SVG_LANE + 4
        height = axis_y + (60 if n else 0)

        def x(us: int) -> float:
            return round(_SVG_LEFT + min(max(us, 0), span) / span * plot_w, 2)

        title, summary = clean(tl.title, _NOT_XML), tl.summary()
        out = [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width_px}" height="{height}" '
            f'viewBox="0 0 {width_px} {height}" font-family="ui-monospace, Menlo, monospace" '
            'font-size="12">',
            _el("title", " · ".join(filter(None, (title, summary)))),
            _el("rect", width="100%", height="100%", fill="#ffffff"),
            _el("text", title or "stream", x=10, y=22, font_size=15, font_weight="bold"),
            _el("text", summary, x=10, y=42),
        ]
        if not n:
            out.append(_el("text", "empty stream: no events", x=10, y=70, font_style="italic"))
            return "\n".join([*out, "</svg>\n"])
        gaps = tl.pauses(scan.gaps)
        # Few enough to draw one by one: read once (from the store, it may be), not per lane.
        marks = list(tl.marks) if n <= _SVG_MAX_MARKS else []
        for gap, _, off, _ in gaps:
            left, w, h = x(off - gap), round(x(off) - x(off - gap), 2), axis_y - 4 - _SVG_TOP
            out.append(
                _el("rect", class_="gap", x=left, y=_SVG_TOP, width=w, height=h, fill="#fef3c7")
            )
        for i, kind in enumerate(lanes):
            y = _SVG_TOP + i * _SVG_LANE
            out.append(_el("text", kind, x=_SVG_LEFT - 8, y=y + 15, text_anchor="end"))
            out.append(
                _el("text", f"{sum(scan.counts[kind]):,}", x=_SVG_LEFT + plot_w + 8, y=y + 15)
            )
            color = LOOK.get(kind, OTHER_LOOK)[1]
            out.append(
                f'<g class="lane" data-kind="{_xml(kind)}" stroke="{color}" stroke-width="1.5">'
            )
            if n > _SVG_MAX_MARKS:
                out.extend(_bins(scan.counts[kind], y))
            else:
                for m in marks:
                    if m.kind == kind:
                        tip = _el("title", f"#{m.seq} {m.label} at {fmt_us(m.offset_us)}")
                        out.append(
                            _vline(x(m.offset_us), y + 4, y + _SVG_LANE - 4, tip, class_="mark")
                        )
            out.append("</g>")
        axis = _el("line", id="axis", x1=_SVG_LEFT, x2=_SVG_LEFT + plot_w, y1=axis_y, y2=axis_y)
        out.append(f'<g stroke="#111827">{axis}')
        steps = ticks(span, plot_w // 90)
        out.extend(_vline(x(t), axis_y, axis_y + 5, class_="tick") for t in steps)
        out.append("</g>")
        out.extend(
            _el("text", fmt_tick(t), x=x(t), y=axis_y + 18, text_anchor="middle") for t in steps
        )
        # TTFB is the earlier: its label goes above TTFT's, clear of TTFT's line.
        for name, us, color, top in (
            ("TTFB", tl.ttfb_us, TTFB_COLOR, _SVG_TOP - 24),
            ("TTFT", tl.ttft_us, TTFT_COLOR, _SVG_TOP - 8),
        ):
            if us is not None:
                at, label = x(us), f"▼ {name} {fmt_us(us)}"
                anchor = "end" if at > _SVG_LEFT + plot_w * 0.75 else "start"
                out.append(
                    _vline(
                        at, top + 4, axis_y, id=name.lower(), stroke=color, stroke_dasharray="4 3"
                    )
                )
                out.append(_el("text", label, x=at, y=top, fill=color, text_anchor=anchor))
        if gaps:
            out.append(_el("text", tl.gap_text(gaps), x=10, y=axis_y + 46))
        return "\n".join([*out, "</svg>\n"])


def _xml(text: str) -> str:
    return escape(clean(text, _NOT_XML), {'"': "&quot;"})


def _el(tag: str, body: str = "", *, raw: bool = False, **attrs: object) -> str:
    """One SVG element, ``_`` in an attribute name spelled ``-``. Text and attributes may come
    from traffic, so both are escaped; ``raw`` marks a body of elements made here."""
    at = "".join(f' {k.rstrip("_").replace("_", "-")}="{_xml(str(v))}"' for k, v in attrs.items())
    return f"<{tag}{at}>{body if raw else _xml(body)}</{tag}>" if body else f"<{tag}{at}/>"


def _vline(x: float, y1: float, y2: float, body: str = "", **attrs: object) -> str:
    return _el("line", body, raw=True, x1=x, x2=x, y1=y1, y2=y2, **attrs)


def _bins(row: list[int], y: int) -> list[str]:
    """One line per pixel column that has events, taller for more (log scale)."""
    top, mid, out = math.log10(max(row) + 1), y + _SVG_LANE / 2, []
    for i, n in enumerate(row):
        if n:
            h = (4 + (_SVG_LANE - 8) * math.log10(n + 1) / top) / 2
            at, y1, y2 = _SVG_LEFT + i + 0.5, round(mid - h, 1), round(mid + h, 1)
            # Numbers only, so written as _vline would, without its escaping: a zoomed
            # timeline of a long stream has one per pixel column, thousands.
            out.append(
                f'<line x1="{at}" x2="{at}" y1="{y1}" y2="{y2}" class="mark bin" data-n="{n}"/>'
            )
    return out
