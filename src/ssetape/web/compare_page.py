"""`/compare?a=ID&b=ID`: two exchanges (a recording and its re-recording, two models on one
prompt) on one time axis, their figures and output texts side by side, and what differs in
their requests.

The timeline is inline SVG drawn here: one row per exchange on a shared scale, a mark per event
(per pixel column past :data:`MARKS_DRAWN` events: a stream of 100,000 stays a few thousand
lines), TTFB and TTFT ticks on each row. Every recorded string is escaped by
:func:`ssetape.web.html.el`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ssetape.storage.models import Exchange
from ssetape.storage.page_reads import PageReads
from ssetape.storage.queries import Queries
from ssetape.views.timeline import (
    LOOK,
    OTHER_LOOK,
    TTFB_COLOR,
    TTFT_COLOR,
    Timeline,
    fmt_tick,
    fmt_us,
    ticks,
)
from ssetape.web.charts import svg
from ssetape.web.html import Markup, cut, el, id_of, join, link, ms, page
from ssetape.web.request_diff import DIFF_ROWS, differences

__all__ = ["MARKS_DRAWN", "ComparePage"]

MARKS_DRAWN = 3000
_WIDTH, _LEFT, _RIGHT, _TOP, _ROW = 1100, 120, 30, 10, 44


class ComparePage:
    """The page for ``?a=&b=`` (ids or uids)."""

    def __init__(self, args: Mapping[str, str], queries: Queries) -> None:
        self.keys = [args.get(k, "").strip() for k in ("a", "b")]
        self.queries = queries

    def render(self) -> tuple[int, str]:
        """(status, page): 200, or 404 naming an exchange that is not there."""
        found: list[Exchange] = []
        missing = []
        reads = PageReads(self.queries.store)
        for key in self.keys:
            # Not their response bodies (which may be of any size): the page compares requests.
            one = key if (n := id_of(key)) is None else n
            x = reads.exchange(one, request_body=True) if key else None
            if x is None:
                missing.append(key)
            else:
                found.append(x)
        if missing:
            named = [k for k in missing if k]
            note = el("p", "no exchange " + ", ".join(named), class_="error") if named else ""
            return (404 if named else 200), page(
                "ssetape: compare", el("h1", "Compare two exchanges"), note, self._form()
            )
        a, b = found
        body = [
            el("h1", f"Compare #{a.id} and #{b.id}"),
            self._form(),
            _facts(a, b),
            el("h2", "Timeline"),
            el("div", self._timeline(a, b), class_="timeline", id="compare-timeline"),
            el(
                "p",
                "one row per exchange, one mark per event (green: content, blue: set-up, yellow: "
                "keep-alive, cyan: the end, red: error); dashed: TTFB (grey) and TTFT (magenta); "
                "hover a mark for its event",
                class_="dim",
            ),
            el("h2", "Output"),
            el("div", _text("a", a), _text("b", b), class_="pair", id="outputs"),
            el("h2", "Request: what differs"),
            _diff(a, b),
        ]
        return 200, page(f"ssetape: compare #{a.id} #{b.id}", *body)

    def _form(self) -> Markup:
        return el(
            "form",
            el("label", "a", el("input", name="a", value=self.keys[0], size="10")),
            el("label", "b", el("input", name="b", value=self.keys[1], size="10")),
            el("button", "compare", type="submit"),
            method="get",
            action="/compare",
            class_="filters",
        )

    def _timeline(self, a: Exchange, b: Exchange) -> Markup:
        lines = [Timeline.of(x, self.queries) for x in (a, b)]
        span = max(tl.span_us for tl in lines)
        plot = _WIDTH - _LEFT - _RIGHT

        def x(us: int) -> float:
            return round(_LEFT + min(max(us, 0), span) / span * plot, 1)

        rows: list[Markup] = []
        for i, (ex, tl) in enumerate(zip((a, b), lines, strict=True)):
            top = _TOP + i * _ROW
            y1, y2 = top + 8, top + _ROW - 8
            parts: list[Markup] = [
                el(
                    "text",
                    f"{'ab'[i]}: #{ex.id}",
                    x=_LEFT - 8,
                    y=top + _ROW / 2 + 4,
                    text_anchor="end",
                ),
                el("rect", x=_LEFT, y=top + 2, width=plot, height=_ROW - 4, fill="#f9fafb"),
            ]
            if len(tl.marks) <= MARKS_DRAWN:
                for m in tl.marks:
                    color = LOOK.get(m.kind, OTHER_LOOK)[1]
                    tip = el("title", f"{'ab'[i]} #{m.seq} {m.label} at {fmt_us(m.offset_us)}")
                    at = x(m.offset_us)
                    parts.append(
                        el("line", tip, x1=at, x2=at, y1=y1, y2=y2, stroke=color, class_="mark")
                    )
            else:
                # One line per pixel column that has events, in the color of its first kind.
                cells: dict[int, str] = {}
                for m in tl.marks:
                    cells.setdefault(int(x(m.offset_us)), m.kind)
                for cell, kind in sorted(cells.items()):
                    color = LOOK.get(kind, OTHER_LOOK)[1]
                    parts.append(
                        el("line", x1=cell, x2=cell, y1=y1, y2=y2, stroke=color, class_="mark bin")
                    )
            for name, us, color in (
                ("TTFB", tl.ttfb_us, TTFB_COLOR),
                ("TTFT", tl.ttft_us, TTFT_COLOR),
            ):
                if us is not None:
                    at = x(us)
                    parts.append(
                        el(
                            "line",
                            el("title", f"{name} {fmt_us(us)}"),
                            x1=at,
                            x2=at,
                            y1=top + 2,
                            y2=top + _ROW - 2,
                            stroke=color,
                            stroke_width=2,
                            stroke_dasharray="3 2",
                            class_=name.lower(),
                        )
                    )
            rows.append(el("g", *parts, class_="row", data_id=ex.id, data_events=len(tl.marks)))
        axis_y = _TOP + 2 * _ROW + 4
        steps = ticks(span, plot // 90)
        axis = [
            el("line", x1=_LEFT, x2=_LEFT + plot, y1=axis_y, y2=axis_y, stroke="#111827"),
            *(
                el("line", x1=x(t), x2=x(t), y1=axis_y, y2=axis_y + 5, stroke="#111827")
                for t in steps
            ),
            *(el("text", fmt_tick(t), x=x(t), y=axis_y + 18, text_anchor="middle") for t in steps),
        ]
        height = axis_y + 26
        return svg(
            height,
            *rows,
            join(axis),
            label=f"#{a.id} and #{b.id} on one time axis",
            width=_WIDTH,
            font_family="ui-monospace, Menlo, monospace",
        )


def _facts(a: Exchange, b: Exchange) -> Markup:
    def row(name: str, of: Callable[[Exchange], object]) -> Markup:
        return el("tr", el("th", name), el("td", of(a)), el("td", of(b)))

    rows = [
        row("exchange", lambda x: link(f"/exchanges/{x.id}", f"#{x.id}")),
        row("started (UTC)", lambda x: x.started_at.isoformat(sep=" ", timespec="seconds")),
        row("model", lambda x: x.model),
        row("state / outcome", lambda x: f"{x.state} / {x.outcome or '-'}"),
        row("status", lambda x: x.status),
        row("TTFB", lambda x: ms(x.ttfb_us)),
        row("TTFT", lambda x: ms(x.ttft_us)),
        row("duration", lambda x: ms(x.duration_us)),
        row("events", lambda x: f"{x.event_count:,}"),
        row("tokens in / out", lambda x: f"{x.input_tokens} / {x.output_tokens}"),
    ]
    return el(
        "table",
        el("thead", el("tr", el("th", ""), el("th", "a"), el("th", "b"))),
        el("tbody", *rows),
        class_="compare",
        id="compare-facts",
    )


def _text(side: str, x: Exchange) -> Markup:
    return el(
        "div",
        el("h3", f"{side}: #{x.id} ", x.model or ""),
        el("pre", cut(x.output_text or ""), class_="text", id=f"output-{side}"),
    )


def _diff(a: Exchange, b: Exchange) -> Markup:
    rows, cut = differences(a, b)
    if not rows:
        return el("p", "the requests are the same", id="request-diff")
    return join(
        [
            el(
                "table",
                el("thead", el("tr", *(el("th", c) for c in ("where", "field", "a", "b")))),
                el(
                    "tbody",
                    *(
                        el(
                            "tr",
                            el("td", w),
                            el("td", el("code", k)),
                            el("td", el("code", va)),
                            el("td", el("code", vb)),
                            data_field=k,
                        )
                        for w, k, va, vb in rows
                    ),
                ),
                class_="diff",
                id="request-diff",
            ),
            el("p", f"the first {DIFF_ROWS} differences", class_="dim") if cut else "",
        ]
    )
