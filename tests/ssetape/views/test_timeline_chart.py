"""The terminal chart of a timeline: lanes, markers, axis, and what traffic cannot do to it."""

from __future__ import annotations

import io
import time
import xml.etree.ElementTree as ET

import pytest
from rich.console import Console

from ssetape.views.timeline import Mark, Timeline
from ssetape.views.timeline_chart import TimelineChart
from ssetape.views.timeline_svg import TimelineSvg
from tests.ssetape.views.timelines import (
    anthropic_stream,
    chart_of,
    chat_stream,
    longest_blank_run,
    svg_marks,
    text_of,
)

MS = 1000
S = 1_000_000

# The terminal chart -----------------------------------------------------------------------------


def test_chat_stream_shows_ttft_the_pause_and_counts() -> None:
    timeline, span = chat_stream()
    chart = chart_of(timeline)
    header = chart.lines[0]
    assert "43 events" in header and "TTFT 412 ms" in header and "TTFB 300 ms" in header
    assert header.startswith("POST /v1/chat gpt-4o · ")
    # Every event is in exactly one lane, and the lanes say which.
    assert chart.counts == {"meta": 2, "content": 40, "terminal": 1}
    assert sum(chart.counts.values()) == 43
    # TTFT's arrow sits over the axis point of 412 ms, TTFB's over 300 ms.
    assert abs(chart.marker("TTFT") - chart.column(412 * MS, span)) <= 1
    assert abs(chart.marker("TTFB") - chart.column(300 * MS, span)) <= 1
    # The first content mark is under the TTFT arrow.
    content = chart.lanes["content"]
    assert chart.origin + len(content) - len(content.lstrip()) == chart.marker("TTFT")
    # The 1.5 s pause (1.53 s between the two deltas) is a run of empty cells that long.
    cell_us = span / chart.cells
    assert abs(longest_blank_run(content) - 1530 * MS / cell_us) <= 2
    gaps = chart.line("longest gap")
    # Gaps are between content events: the wait for the first delta is TTFT, not a gap.
    assert gaps.startswith("longest gap: 1.53 s before #22 (content)")
    # Bursts of a few deltas per cell show the denser glyph; the legend says what they mean.
    assert "•" in content
    assert any(line.startswith("· 1  • 2-9") for line in chart.lines)


def test_ticks_are_labelled_where_their_time_is() -> None:
    timeline, span = chat_stream()
    chart = chart_of(timeline)
    axis = next(line for line in chart.lines if "└" in line)
    labels = chart.lines[chart.lines.index(axis) + 1]
    assert labels[chart.origin] == "0"
    at = labels.index("1 s")
    assert axis[at] == "┬"
    assert abs(at - chart.column(1 * S, span)) <= 1


def test_anthropic_stream_has_a_ping_lane_and_the_pause_between_pings() -> None:
    chart = chart_of(anthropic_stream())
    assert list(chart.lanes) == ["meta", "content", "ping", "terminal"]
    assert chart.counts == {"meta": 4, "content": 30, "ping": 2, "terminal": 1}
    assert "37 events" in chart.lines[0]
    # The lone ping sits inside the 12 s content pause.
    content, ping = chart.lanes["content"], chart.lanes["ping"]
    lone = ping.rindex("·")
    assert content[lone] == " " and "·" not in ping[lone - 2 : lone] + ping[lone + 1 : lone + 3]
    assert longest_blank_run(content) >= chart.cells // 2
    # The ping keeps the connection alive but carries nothing: one pause of 12 s.
    assert chart.line("longest gap").startswith("longest gap: 12.04 s before #20 (content)")


def test_empty_stream_says_so() -> None:
    timeline = Timeline([], ttfb_us=None, ttft_us=None, duration_us=None, title="GET /x")
    lines = text_of(timeline)
    assert lines[0] == "GET /x · 0 events"
    assert any("empty stream" in line for line in lines)
    assert not any("└" in line for line in lines)


def test_one_event() -> None:
    mark = Mark(1, 80 * MS, "terminal", "message")
    chart = chart_of(Timeline([mark], ttfb_us=50 * MS, ttft_us=None, duration_us=100 * MS))
    assert "1 event ·" in chart.lines[0]
    assert chart.counts == {"terminal": 1}
    assert chart.lanes["terminal"].strip() == "·"
    assert not any("longest gap" in line for line in chart.lines)


def test_all_events_at_offset_zero() -> None:
    marks = [Mark(i, 0, "content", "message") for i in range(1, 6)]
    chart = chart_of(Timeline(marks, ttfb_us=0, ttft_us=0, duration_us=0))
    assert chart.lanes["content"][0] == "•" and chart.lanes["content"][1:].strip() == ""
    assert chart.counts == {"content": 5}
    assert chart.marker("TTFT") == chart.origin


@pytest.mark.parametrize(("count", "glyph"), [(1, "·"), (3, "•"), (42, "●"), (150, "█")])
def test_denser_glyphs_for_bursts(count: int, glyph: str) -> None:
    marks = [Mark(i, 5 * S, "content", "d") for i in range(count)]
    chart = chart_of(Timeline(marks, ttfb_us=None, ttft_us=None, duration_us=10 * S))
    assert chart.lanes["content"].strip() == glyph


def test_hours_long_stream() -> None:
    marks = [Mark(1, 2 * S, "meta", "m"), Mark(2, 3600 * S, "content", "d")]
    marks.append(Mark(3, 3 * 3600 * S - S, "terminal", "t"))
    timeline = Timeline(marks, ttfb_us=S, ttft_us=3600 * S, duration_us=3 * 3600 * S)
    chart = chart_of(timeline)
    assert "duration 3h00m00s" in chart.lines[0]
    labels = chart.lines[chart.lines.index(next(x for x in chart.lines if "└" in x)) + 1]
    assert " 1h " in labels and " 2h " in labels
    assert abs(chart.marker("TTFT") - chart.column(3600 * S, 3 * 3600 * S)) <= 1
    # One content event: no gap between content events to list (the duration says the rest).
    assert not any(line.startswith("longest gap") for line in chart.lines)


def test_ttft_near_the_end_puts_its_label_left_of_the_arrow() -> None:
    marks = [Mark(1, 9900 * MS, "content", "d")]
    chart = chart_of(Timeline(marks, ttfb_us=None, ttft_us=9900 * MS, duration_us=10 * S))
    row = next(line for line in chart.lines if "▼" in line)
    assert row.rstrip().endswith("TTFT 9.90 s ▼")
    assert abs(chart.marker("TTFT") - chart.column(9900 * MS, 10 * S)) <= 1


@pytest.mark.parametrize("width", [50, 60, 120])
def test_other_widths(width: int) -> None:
    timeline, span = chat_stream(title="a very long title " * 10)
    chart = chart_of(timeline, width)
    # The title gives way to the numbers, which give way only below their own length.
    if width >= 60:
        assert chart.lines[0].endswith("TTFT 412 ms")
    if width >= 100:
        assert chart.lines[0].startswith("a very long title") and "…" in chart.lines[0]
    assert abs(chart.marker("TTFT") - chart.column(412 * MS, span)) <= 1


def test_network_text_cannot_style_or_control_the_terminal() -> None:
    marks = [Mark(1, 0, "[bold]x\x1b[2J", "[red]y")]
    title = "[link=http://evil]t[/link]\x1b]0;pwned\x07"
    console = Console(width=80, record=True, file=io.StringIO())
    console.print(
        TimelineChart(
            Timeline(marks, ttfb_us=None, ttft_us=None, duration_us=1, title=title)
        ).render()
    )
    out = console.export_text()
    assert "\x1b" not in out and "\x07" not in out
    assert "[link=http://evil]t[/link]" in out and "[bold]x" in out


def test_a_million_events_is_binned_fast_and_fits() -> None:
    marks = [Mark(i, i * 10, "content", "d") for i in range(1, 1_000_001)]
    marks[500_000] = Mark(500_001, marks[500_000].offset_us, "ping", ":")
    timeline = Timeline(marks, ttfb_us=5, ttft_us=10, duration_us=10 * S + 10)
    start = time.perf_counter()
    chart = chart_of(timeline)
    assert time.perf_counter() - start < 2
    assert chart.counts == {"content": 999_999, "ping": 1}
    assert "1,000,000 events" in chart.lines[0]
    assert set(chart.lanes["content"]) == {"█"}
    # A steady stream has no pauses to list, only its longest gap: the ping carries no
    # content, so the content events on each side of it are 20 µs apart.
    assert chart.line("longest gap").startswith("longest gap: 20 µs before #500002 (content)")
    start = time.perf_counter()
    svg = TimelineSvg(timeline).render()
    assert time.perf_counter() - start < 2
    assert len(svg) < 200_000
    marks_of = svg_marks(ET.fromstring(svg))
    assert sum(int(m.get("data-n", "1")) for m in marks_of) == 1_000_000
