"""A :class:`~ssetape.views.ws_timeline.SessionTimeline` for a terminal: the client's lane above,
the server's below, the turns under them on the same axis, then the turns as a table.

Frame kinds, titles and reasons come from network traffic: everything is built as
:class:`rich.text.Text` (never markup), with control characters replaced.
"""

from __future__ import annotations

import math

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ssetape.analysis.turns import Turn
from ssetape.views.escape import cell
from ssetape.views.timeline import TTFT_STYLE, fmt_us
from ssetape.views.timeline_chart import axis_lines, fit, glyph, header_line
from ssetape.views.ws_timeline import ASK, CONTENT, ERROR, LANES, SessionTimeline
from ssetape.vocabulary import ERROR_OUTCOMES, Outcome

__all__ = ["SessionChart", "chart_cells", "turns_table"]

_LABEL_W = 7  # "client" and a space
# A cell's style is its most telling kind's: an error, content, a client frame that asked.
_STYLES = ((ERROR, "bold red"), (CONTENT, "green"), (ASK, TTFT_STYLE))
_LANE_STYLE = {LANES[0]: "white", LANES[1]: "blue"}
_TURN_STYLES = ("cyan", "bright_cyan")
_LEGEND = "· 1  • 2-9  ● 10-99  █ 100+ frames per cell of {cell}"
_COLORS = "green: content · red: an error the server sent · magenta: a client frame that asked"


def chart_cells(width: int, frames: int) -> int:
    """The cells a chart ``width`` columns wide has room for beside its counts (``frames``:
    the session's, whose width the count column takes at most)."""
    return max(10, width - _LABEL_W - 3 - len(f"{frames:,}"))


class SessionChart:
    """The terminal picture of one session's timeline."""

    def __init__(self, timeline: SessionTimeline) -> None:
        self.timeline = timeline

    def render(self, width: int = 80) -> RenderableType:
        tl = self.timeline
        lines: list[RenderableType] = [self._header(width)]
        total = tl.lane_total(LANES[0]) + tl.lane_total(LANES[1])
        if not total:
            lines.append(Text("no frames were recorded", style="italic"))
            return Group(*lines)
        count_w = len(f"{max(tl.lane_total(lane) for lane in LANES):,}")
        cells = tl.cells
        for lane in LANES:
            line = Text(lane.ljust(_LABEL_W), style=_LANE_STYLE[lane])
            line.append("│", style="dim")
            kinds = tl.counts[lane]
            for i, n in enumerate(tl.cell_counts(lane)):
                style = next((s for k, s in _STYLES if kinds.get(k, (0,) * cells)[i]), None)
                line.append(glyph(n) if n else " ", style=style or _LANE_STYLE[lane])
            line.append("│", style="dim")
            line.append(f" {tl.lane_total(lane):>{count_w},}")
            lines.append(fit(line, width))
        lines.append(fit(self._turns_row(count_w), width))
        lines.extend(self._axis(width))
        cell_us = fmt_us(math.ceil(tl.span_us / cells))
        lines.append(fit(Text(_LEGEND.format(cell=cell_us), style="dim"), width))
        lines.append(fit(Text(_COLORS, style="dim"), width))
        return Group(*lines)

    def _header(self, width: int) -> Text:
        return header_line(self.timeline.title, self.timeline.summary(), width)

    def _turns_row(self, count_w: int) -> Text:
        """Each turn from its start to its end, numbered where its number fits."""
        tl = self.timeline
        cells, span = tl.cells, tl.span_us
        chars, styles = [" "] * cells, [""] * cells

        def col(us: int) -> int:
            return min(cells - 1, max(0, us * cells // span))

        for t in tl.session.turns:
            first = col(t.start_us)
            last = col(t.end_us if t.end_us is not None else span)
            style = "red" if t.outcome in ERROR_OUTCOMES else _TURN_STYLES[t.n % 2]
            for i in range(first, last + 1):
                chars[i], styles[i] = "━", style
            label = str(t.n)
            if last - first + 1 >= len(label):
                chars[first : first + len(label)] = label
        line = Text("turns".ljust(_LABEL_W), style="dim")
        line.append("│", style="dim")
        for ch, style in zip(chars, styles, strict=True):
            line.append(ch, style=style)
        line.append("│", style="dim")
        line.append(f" {tl.session.total:>{count_w},}")
        return line

    def _axis(self, width: int) -> list[Text]:
        return axis_lines(self.timeline.span_us, self.timeline.cells, width)


def _ms(us: int | None) -> str:
    return "-" if us is None else fmt_us(us)


def _tokens(t: Turn) -> str:
    if t.input_tokens is None and t.output_tokens is None:
        return "-"
    return f"{t.input_tokens if t.input_tokens is not None else '-'}/" + (
        f"{t.output_tokens if t.output_tokens is not None else '-'}"
    )


def turns_table(turns: list[Turn], total: int) -> list[RenderableType]:
    """The turns as a table (``total``: how many the session had), and what was left out."""
    title = f"{total:,} turn" + ("" if total == 1 else "s")
    t = Table(title=title, title_justify="left", box=None, header_style="bold")
    for name in ("turn", "start", "TTFT", "duration", "longest gap", "frames", "tokens in/out"):
        t.add_column(name, justify="right")
    t.add_column("outcome", overflow="fold")
    for turn in turns:
        failed = turn.outcome in ERROR_OUTCOMES
        outcome = f"{turn.outcome or '-'}" + (f" ({turn.reason})" if turn.reason else "")
        t.add_row(
            str(turn.n), fmt_us(turn.start_us), _ms(turn.ttft_us), _ms(turn.duration_us),
            _ms(turn.gap_max_us), f"{turn.frames:,}", _tokens(turn),
            cell(outcome, "red" if failed else "" if turn.outcome == Outcome.COMPLETED
                 else "yellow"),
        )  # fmt: skip
    out: list[RenderableType] = [t]
    if total > len(turns):
        more = f"… {total - len(turns):,} more turns: show --json --full lists every one"
        out.append(Text(more, style="dim"))
    return out
