"""`/session/{name}`: one session's calls on one time axis, with its totals above.

A row per call, in start order: a bar from the call's start (its offset from the session's
first call) to its end, grey until the response's first byte (TTFB), amber until the first
token (TTFT), green while it streamed (red for a call that failed); each row links to its
exchange. A long session comes in pages of calls (``?after=ID``), each page drawn over its own
span of the session's time; the totals are always the whole session's.

The chart is inline SVG made with :func:`ssetape.web.html.el` (every recorded string escaped)
in the frame of :func:`ssetape.web.charts.svg`, with the ticks, labels and colors of
:mod:`ssetape.views.timeline`: no script, under the viewer's strict policy.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from urllib.parse import quote

from ssetape.cost.price import format_usd
from ssetape.storage.queries import Queries
from ssetape.storage.session_queries import SessionCall, SessionQueries, SessionTotals
from ssetape.views.timeline import LOOK, TTFB_COLOR, TTFT_COLOR, fmt_tick, fmt_us, ticks
from ssetape.web.charts import WIDTH, svg
from ssetape.web.html import Markup, el, join, link, ms, page, query

__all__ = ["CALLS_PER_PAGE", "SessionPage", "session_href"]

CALLS_PER_PAGE = 200
_LEFT, _RIGHT, _TOP, _ROW, _BAR = 240, 90, 26, 22, 12
_LABEL_MAX = 30  # characters of a row's label (a model name): the whole is in its tooltip
_WAIT, _FIRST = "#d1d5db", "#fcd34d"
_STREAM, _ERROR = LOOK["content"][1], LOOK["error"][1]
_ONE_US = dt.timedelta(microseconds=1)


def session_href(name: str) -> str:
    """The session page's URL: the name quoted whole (a pytest node id has slashes, ``?``,
    ``#`` and brackets)."""
    return f"/session/{quote(name, safe='')}"


class SessionPage:
    """What a session URL asks for: the session, and the call a page starts after."""

    def __init__(self, name: str, queries: Queries, *, after: int | None = None) -> None:
        self.name, self.after = name, after
        self.sessions = SessionQueries(queries.store)

    def render(self) -> tuple[int, str]:
        """(status, page): 404 for a session with no calls."""
        totals = self.sessions.totals(self.name)
        if totals is None:
            return 404, page("ssetape: not found", el("h1", "no session ", el("code", self.name)))
        calls = self.sessions.calls(self.name, limit=CALLS_PER_PAGE, after=self.after)
        body = [
            el("h1", "Session ", el("code", self.name)),
            el("p", link(f"/{query({'session': self.name})}", "its calls in the list")),
            _totals(totals),
            el("div", _chart(calls, totals.first_start), class_="session-timeline"),
        ]
        if self.after is not None:
            body.append(el("p", link(session_href(self.name), "← from the first call")))
        if len(calls) == CALLS_PER_PAGE:
            later = f"{session_href(self.name)}?after={calls[-1].id}"
            body.append(el("p", link(later, "later calls →", rel="next", id="later")))
        return 200, page(f"ssetape: session {self.name}", *body)


def _totals(t: SessionTotals) -> Markup:
    """The session's totals; each value's exact number in ``data-value`` (µs for times)."""
    started = t.first_start.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    facts: list[tuple[str, int, str]] = [
        ("calls", t.calls, f"{t.calls:,}"),
        ("failed", t.failed, f"{t.failed:,}"),
        ("tokens in", t.input_tokens, f"{t.input_tokens:,}"),
        ("tokens out", t.output_tokens, f"{t.output_tokens:,}"),
        ("wall time", t.wall_us, fmt_us(t.wall_us)),
        ("waiting on first tokens", t.ttft_total_us, fmt_us(t.ttft_total_us)),
    ]
    items = [join([el("dt", k), el("dd", shown, data_value=v)]) for k, v, shown in facts]
    # Exact nano-dollars in data-value; "no price" (never $0) when no call has one.
    unpriced = t.calls - t.priced
    cost = format_usd(t.cost_nusd) + (
        f" ({unpriced:,} without a price)" if t.priced and unpriced else ""
    )
    items.append(
        join([el("dt", "cost"), el("dd", cost, data_value=t.cost_nusd if t.priced else "")])
    )
    items.append(join([el("dt", "first call (UTC)"), el("dd", started)]))
    note = (
        f"usage reported by {t.usage_reported:,} of {t.calls:,} calls; calls may overlap, so "
        "the wait on first tokens (their TTFTs summed) can be more than the wall time"
    )
    return join([el("dl", *items, class_="facts totals"), el("p", note, class_="dim")])


def _end_us(c: SessionCall) -> int:
    """How long after its start the call's bar ends: its duration, or the last thing known
    of a call still streaming."""
    return max(c.duration_us or 0, c.ttft_us or 0, c.ttfb_us or 0)


def _short(text: str) -> str:
    return text if len(text) <= _LABEL_MAX else text[: _LABEL_MAX - 1] + "…"


def _chart(calls: list[SessionCall], first: dt.datetime) -> Markup:
    if not calls:
        return el("p", "no calls past this one", class_="empty")
    offsets = [(c.started_at - first) // _ONE_US for c in calls]
    lo = offsets[0]
    hi = max(o + _end_us(c) for o, c in zip(offsets, calls, strict=True))
    span = max(hi - lo, 1)
    plot = WIDTH - _LEFT - _RIGHT

    def x(us: int) -> float:
        return round(_LEFT + (us - lo) / span * plot, 1)

    rows: list[Markup] = []
    for i, (off, c) in enumerate(zip(offsets, calls, strict=True)):
        rows.append(_row(c, off, _TOP + i * _ROW, x))
    axis_y = _TOP + len(calls) * _ROW + 4
    # Ticks at round offsets from the session's start, over this page's span.
    step = ticks(span, plot // 90).step
    steps = range(-(-lo // step) * step, hi + 1, step)
    axis = [
        el("line", x1=_LEFT, x2=_LEFT + plot, y1=axis_y, y2=axis_y, stroke="#111827"),
        *(el("line", x1=x(t), x2=x(t), y1=axis_y, y2=axis_y + 5, stroke="#111827") for t in steps),
        *(
            el("text", fmt_tick(t), x=x(t), y=axis_y + 18, text_anchor="middle", fill="#374151")
            for t in steps
        ),
    ]
    legend = join([
        el("rect", x=_LEFT, y=6, width=10, height=10, fill=_WAIT),
        el("text", "to first byte", x=_LEFT + 14, y=15),
        el("rect", x=_LEFT + 120, y=6, width=10, height=10, fill=_FIRST),
        el("text", "to first token", x=_LEFT + 134, y=15),
        el("rect", x=_LEFT + 250, y=6, width=10, height=10, fill=_STREAM),
        el("text", "streaming", x=_LEFT + 264, y=15),
        el("rect", x=_LEFT + 350, y=6, width=10, height=10, fill=_ERROR),
        el("text", "failed", x=_LEFT + 364, y=15),
        el("text", "time from the session's first call", x=_LEFT + plot, y=15,
           text_anchor="end", fill="#374151"),
    ])  # fmt: skip
    return svg(axis_y + 26, legend, *rows, join(axis), label="the session's calls over time")


def _row(c: SessionCall, off: int, y: int, place: Callable[[int], float]) -> Markup:
    mid = y + _ROW / 2
    top = mid - _BAR / 2
    end = off + _end_us(c)
    ttfb = None if c.ttfb_us is None else off + c.ttfb_us
    ttft = None if c.ttft_us is None else off + c.ttft_us
    # The bar's parts: until the first byte, until the first token, then the rest (streaming,
    # or red for a call that failed; grey for one with no answer at all).
    segments, at = [], off
    if ttfb is not None:
        segments.append((at, ttfb, _WAIT))
        at = ttfb
    if ttft is not None:
        segments.append((at, ttft, _FIRST if ttfb is not None else _WAIT))
        at = ttft
    segments.append((at, end, _ERROR if c.failed else _STREAM if at > off else _WAIT))
    parts = [
        el("rect", x=place(a), y=top, width=max(round(place(b) - place(a), 1), 1.0),
           height=_BAR, fill=fill)
        for a, b, fill in segments
    ]  # fmt: skip
    marks = []
    for name, mark, color in (("ttfb", ttfb, TTFB_COLOR), ("ttft", ttft, TTFT_COLOR)):
        if mark is not None:
            marks.append(el("line", x1=place(mark), x2=place(mark), y1=top - 2, y2=top + _BAR + 2,
                            stroke=color, stroke_width=2, class_=name))  # fmt: skip
    what = " ".join(str(v) for v in (c.model or c.path, c.status, c.outcome or c.state) if v)
    tip = (
        f"#{c.id} {what}: starts at +{fmt_us(off)}; TTFB {ms(c.ttfb_us) or '-'}, "
        f"TTFT {ms(c.ttft_us) or '-'}, duration {ms(c.duration_us) or '-'}; tokens "
        f"{_n(c.input_tokens)} in / {_n(c.output_tokens)} out; cost {format_usd(c.cost_nusd)}"
    )
    label = f"#{c.id} {_short(c.model or c.path)}"
    group = el(
        "g",
        el("title", tip),
        # The whole row is the link's target, not only its bar and text.
        el(
            "rect", x=0, y=y, width=WIDTH, height=_ROW, fill="#1d4ed8", fill_opacity=0, class_="hit"
        ),
        el("text", label, x=_LEFT - 8, y=mid + 4, text_anchor="end"),
        *parts,
        *marks,
        el("text", ms(c.duration_us) or "…", x=WIDTH - _RIGHT + 8, y=mid + 4),
        class_="call",
        data_id=c.id,
        data_offset_us=off,
        data_error="1" if c.failed else None,
    )
    return el("a", group, href=f"/exchanges/{c.id}")


def _n(value: int | None) -> str:
    return "?" if value is None else f"{value:,}"
