"""A WebSocket session drawn as inline SVG, and its turns as a table: the exchange page's view of
a session, also `ssetape show --svg`'s image of one.

Two lanes on one time axis, the client's frames above the server's (a client frame that asked
for a turn in magenta; server frames that carried content green, errors red, the rest blue),
and under them the turns: amber from the asking frame to the first content (the turn's TTFT),
green while it streamed, red for a turn that failed, a faint band behind the lanes. Up to
``MARKS_KEPT`` frames are drawn one by one with a tooltip each; a longer session is drawn
from its counts per pixel column. Built with :func:`ssetape.web.html.el`, which escapes every
recorded string (frame kinds, the URL, a close reason), under the viewer's strict policy (no
script, no style attribute).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ssetape.analysis.turns import Turn
from ssetape.views.timeline import LOOK, TTFT_COLOR, fmt_tick, fmt_us, ticks
from ssetape.views.ws_timeline import (
    ASK,
    CONTENT,
    ERROR,
    LANES,
    OTHER,
    FrameMark,
    SessionTimeline,
    turn_label,
)
from ssetape.vocabulary import ERROR_OUTCOMES
from ssetape.web.charts import svg
from ssetape.web.html import Markup, el, join, link, ms

__all__ = ["SVG_WIDTH", "session_section", "session_svg", "svg_cells", "turns_table"]

SVG_WIDTH = 1000
_LEFT, _RIGHT, _TOP, _LANE, _TURNS = 70, 80, 46, 28, 20
_COLORS = {
    (LANES[0], ASK): TTFT_COLOR,
    (LANES[0], OTHER): "#6b7280",
    (LANES[1], CONTENT): LOOK["content"][1],
    (LANES[1], ERROR): LOOK["error"][1],
    (LANES[1], OTHER): LOOK["meta"][1],
}
_ORDER = (ERROR, CONTENT, ASK, OTHER)  # a pixel column's color: its most telling kind's
_WAIT, _STREAM, _FAILED, _BAND = "#fcd34d", LOOK["content"][1], LOOK["error"][1], "#f1f5f9"


def svg_cells(width: int) -> int:
    """The pixel columns of the plot in an image ``width`` wide: one cell each."""
    return max(1, width - _LEFT - _RIGHT)


def session_svg(tl: SessionTimeline, *, width: int = SVG_WIDTH, standalone: bool = False) -> str:
    """The session's two lanes and its turns (``tl`` read with :func:`svg_cells` cells).
    ``standalone``: a file of its own (white, with its title drawn), not inside a page."""
    plot = svg_cells(width)
    span = tl.span_us
    lanes_top = _TOP if standalone else 8
    turns_y = lanes_top + len(LANES) * _LANE + 4
    axis_y = turns_y + _TURNS + 6

    def x(us: int) -> float:
        return round(_LEFT + min(max(us, 0), span) / span * plot, 2)

    body: list[Markup] = []
    if standalone:
        body += [
            el("rect", width="100%", height="100%", fill="#ffffff"),
            el("text", tl.title, x=10, y=18, font_size=14, font_weight="bold"),
            el("text", tl.summary(), x=10, y=36),
        ]
    turns = tl.session.turns
    body += [_band(t, x, lanes_top, turns_y - 2, span) for t in turns]
    for i, lane in enumerate(LANES):
        y = lanes_top + i * _LANE
        frames = (
            _marks([m for m in tl.marks if m.lane == lane], x, y)
            if tl.marks is not None
            else _bins(tl, lane, y)
        )
        body.append(
            el(
                "g",
                el("text", lane, x=_LEFT - 8, y=y + 18, text_anchor="end"),
                el("line", x1=_LEFT, x2=_LEFT + plot, y1=y + _LANE, y2=y + _LANE,
                   stroke="#e5e7eb"),
                *frames,
                el("text", f"{tl.lane_total(lane):,}", x=_LEFT + plot + 8, y=y + 18),
                class_="lane",
                data_lane=lane,
                data_frames=tl.lane_total(lane),
            )
        )  # fmt: skip
    body.append(
        el(
            "g",
            el("text", "turns", x=_LEFT - 8, y=turns_y + 14, text_anchor="end"),
            *(_turn_bar(t, x, turns_y, span) for t in turns),
            el("text", f"{tl.session.total:,}", x=_LEFT + plot + 8, y=turns_y + 14),
            class_="turns",
        )
    )
    steps = ticks(span, plot // 90)
    body += [
        el("line", x1=_LEFT, x2=_LEFT + plot, y1=axis_y, y2=axis_y, stroke="#111827"),
        *(el("line", x1=x(t), x2=x(t), y1=axis_y, y2=axis_y + 5, stroke="#111827") for t in steps),
        *(
            el("text", fmt_tick(t), x=x(t), y=axis_y + 18, text_anchor="middle", fill="#374151")
            for t in steps
        ),
    ]
    body.append(_legend(axis_y + 40))
    label = f"client and server frames of the session over time: {tl.summary()}"
    return str(svg(axis_y + 50, *body, label=label, width=width))


_KEY = (
    (TTFT_COLOR, "a client frame that asked"),
    (_COLORS[LANES[1], CONTENT], "content"),
    (_COLORS[LANES[1], ERROR], "an error the server sent"),
    (_COLORS[LANES[1], OTHER], "other"),
    (_WAIT, "waiting for the first content (TTFT)"),
)


def _legend(y: int) -> Markup:
    parts, at = [], _LEFT
    for color, what in _KEY:
        parts += [el("rect", x=at, y=y - 9, width=10, height=10, fill=color),
                  el("text", what, x=at + 14, y=y, fill="#374151")]  # fmt: skip
        at += 14 + 7 * len(what) + 18
    return el("g", *parts, class_="legend")


def _marks(marks: list[FrameMark], x: Callable[[int], float], y: int) -> list[Markup]:
    out = []
    for m in marks:
        at = x(m.offset_us)
        where = "" if m.turn is None else f", turn {m.turn}"
        tip = f"#{m.seq} {m.lane} {m.label or '-'} at {fmt_us(m.offset_us)}{where}"
        out.append(
            el("line", el("title", tip), x1=at, x2=at, y1=y + 5, y2=y + _LANE - 5,
               stroke=_COLORS[m.lane, m.kind], stroke_width=1.5, class_=f"mark {m.kind}",
               data_seq=m.seq)
        )  # fmt: skip
    return out


def _bins(tl: SessionTimeline, lane: str, y: int) -> list[Markup]:
    """One line per pixel column that has frames, taller for more (log scale)."""
    row = tl.cell_counts(lane)
    kinds = tl.counts[lane]
    top = math.log10(max(row) + 1) or 1.0
    out = []
    for i, n in enumerate(row):
        if not n:
            continue
        kind = next(k for k in _ORDER if k in kinds and kinds[k][i])
        h = (4 + (_LANE - 10) * math.log10(n + 1) / top) / 2
        mid, at = y + _LANE / 2, _LEFT + i + 0.5
        out.append(el("line", x1=at, x2=at, y1=round(mid - h, 1), y2=round(mid + h, 1),
                      stroke=_COLORS[lane, kind], class_=f"mark bin {kind}", data_n=n))  # fmt: skip
    return out


def _end(t: Turn, span: int) -> int:
    return t.end_us if t.end_us is not None else span


def _band(t: Turn, x: Callable[[int], float], top: int, bottom: int, span: int) -> Markup:
    """A faint band behind the lanes over the turn's time."""
    a, b = x(t.start_us), x(_end(t, span))
    return el("rect", x=a, y=top, width=max(round(b - a, 2), 1.0), height=bottom - top,
              fill=_BAND, class_="turn-band")  # fmt: skip


def _turn_bar(t: Turn, x: Callable[[int], float], y: int, span: int) -> Markup:
    start, end = t.start_us, _end(t, span)
    first = t.first_content_us
    failed = t.outcome in ERROR_OUTCOMES
    parts: list[tuple[int, int, str]] = []
    if first is not None and first > start:
        parts.append((start, first, _WAIT))  # the wait for the first content: TTFT
    rest = first if first is not None else start
    parts.append((rest, end, _FAILED if failed else _STREAM if first is not None else _WAIT))
    rects = [
        el("rect", x=x(a), y=y + 3, width=max(round(x(b) - x(a), 2), 1.0), height=_TURNS - 6,
           fill=fill)
        for a, b, fill in parts
    ]  # fmt: skip
    a, b = x(start), x(end)
    label = str(t.n)
    number = (
        el("text", label, x=round((a + b) / 2, 2), y=y + 14, text_anchor="middle", font_size=10)
        if b - a >= 7 * len(label) + 4
        else ""
    )
    return el("g", el("title", turn_label(t)), *rects, number, class_="turn", data_turn=t.n,
              data_outcome=t.outcome, data_ttft_us=t.ttft_us)  # fmt: skip


def turns_table(turns: list[Turn], total: int) -> Markup:
    """The turns, each linked to its first frame in the events below."""
    head = ("turn", "start", "TTFT", "duration", "longest gap", "frames", "tokens in / out",
            "outcome")  # fmt: skip
    rows = []
    for t in turns:
        seq = t.asked_seq if t.asked_seq is not None else t.first_seq
        tokens = (
            "" if t.input_tokens is None and t.output_tokens is None
            else f"{_n(t.input_tokens)} / {_n(t.output_tokens)}"
        )  # fmt: skip
        rows.append(
            el(
                "tr",
                el("td", link(f"?after={seq - 1}#event-{seq}", t.n)),
                el("td", ms(t.start_us)),
                el("td", ms(t.ttft_us)),
                el("td", ms(t.duration_us)),
                el("td", ms(t.gap_max_us)),
                el("td", f"{t.frames:,}"),
                el("td", tokens),
                el("td", t.outcome, f" ({t.reason})" if t.reason else "",
                   class_="failed" if t.outcome in ERROR_OUTCOMES else None),
                class_="turn",
                data_turn=t.n,
                data_ttft_us=t.ttft_us,
                data_outcome=t.outcome,
            )
        )  # fmt: skip
    more = (
        el("p", f"the first {len(turns):,} of {total:,} turns", class_="dim")
        if total > len(turns)
        else ""
    )
    return join([
        el("table", el("thead", el("tr", *(el("th", c) for c in head))), el("tbody", *rows),
           class_="turns", id="turns"),
        more,
    ])  # fmt: skip


def session_section(tl: SessionTimeline) -> Markup:
    """The exchange page's section for a session: the two lanes, then the turns."""
    s = tl.session
    lanes = "; ".join(
        f"{name}: {_frames(lane.frames)} ({lane.text:,} text, {lane.binary:,} binary, "
        f"{lane.bytes:,} bytes)"
        for name, lane in ((LANES[0], s.client), (LANES[1], s.server))
    ) + (f"; {_frames(s.audio_deltas)} of audio, counted, not decoded" if s.audio_deltas else "")
    return el(
        "section",
        el("h2", "Session timeline"),
        el("p", lanes, id="lanes"),
        el("div", Markup(session_svg(tl)), class_="session-timeline", id="ws-timeline"),
        el("h2", f"Turns ({s.total:,})"),
        turns_table(s.turns, s.total),
        id="session",
    )


def _frames(n: int) -> str:
    return f"{n:,} frame" + ("" if n == 1 else "s")


def _n(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"
