"""Timeline: the terminal chart and the SVG read the way a user checks them, on realistic streams
and on the edges (empty, one event, all at once, hours long, a million events)."""

from __future__ import annotations

import io
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.cells import cell_len
from rich.console import Console

from ssetape.views.timeline import KINDS, Mark, Timeline

MS = 1000
S = 1_000_000
SVG = "{http://www.w3.org/2000/svg}"


def text_of(timeline: Timeline, width: int = 80) -> list[str]:
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(timeline.render(width))
    return console.export_text().splitlines()


@dataclass
class Chart:
    """The terminal chart read back: where the axis is and what each lane shows."""

    lines: list[str]
    origin: int  # column of the axis' time 0
    cells: int
    lanes: dict[str, str]  # kind -> its cells, TTFT guide shown as empty
    counts: dict[str, int]

    def column(self, us: int, span: int) -> float:
        return self.origin + us / span * self.cells

    def marker(self, name: str) -> int:
        """The column of the arrow of ``name``'s "▼ NAME …" or "NAME … ▼" label."""
        row = next(line for line in self.lines if "▼" in line and name in line)
        at = row.index(name)
        return at - 2 if row[at - 2 : at] == "▼ " else row.index("▼", at)

    def line(self, start: str) -> str:
        return next(line for line in self.lines if line.startswith(start))


def chart_of(timeline: Timeline, width: int = 80) -> Chart:
    lines = text_of(timeline, width)
    assert all(cell_len(line) <= width for line in lines), lines
    axis = next(line for line in lines if "└" in line)
    origin = axis.index("└") + 1
    cells = axis.index("┘") - origin
    lanes, counts = {}, {}
    for line in lines:
        if len(line) > origin + cells and line[origin - 1] == "│" == line[origin + cells]:
            kind = line[: origin - 1].strip()
            lanes[kind] = line[origin : origin + cells].replace("┊", " ")
            counts[kind] = int(line[origin + cells + 1 :].replace(",", ""))
    return Chart(lines, origin, cells, lanes, counts)


def longest_blank_run(cells: str) -> int:
    """The longest run of empty cells between the lane's first and last mark."""
    return max(
        len(run) for run in "".join("x" if c != " " else " " for c in cells.strip()).split("x")
    )


def stored(seq: int, offset_us: int, event: str | None, data: str | None, api: str) -> Mark:
    """A mark made the way the CLI makes one from a stored event."""
    return Mark(seq, offset_us, Timeline.classify(event, data, api), Timeline.label_of(event, data))


def chunk(delta: dict[str, object], finish: str | None = None) -> str:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return orjson.dumps({"object": "chat.completion.chunk", "choices": [choice]}).decode()


def chat_stream(title: str = "POST /v1/chat gpt-4o") -> tuple[Timeline, int]:
    """40 content deltas 30 ms apart with a 1.5 s pause after the 20th; returns the span."""
    api = "chat_completions"
    marks = [stored(1, 350 * MS, None, chunk({"role": "assistant", "content": ""}), api)]
    offset = 412 * MS
    for i in range(40):
        if i == 20:
            offset += 1500 * MS
        marks.append(stored(len(marks) + 1, offset, None, chunk({"content": f"w{i} "}), api))
        offset += 30 * MS
    marks.append(stored(len(marks) + 1, offset, None, chunk({}, "stop"), api))
    marks.append(stored(len(marks) + 1, offset + 2 * MS, None, "[DONE]", api))
    duration = offset + 3 * MS
    timeline = Timeline(
        marks, ttfb_us=300 * MS, ttft_us=412 * MS, duration_us=duration, title=title
    )
    return timeline, duration


def anthropic_stream() -> Timeline:
    """message_start, pings (one alone in a 12 s pause), 30 text deltas, the closing events."""

    def ev(name: str, **fields: object) -> tuple[str, str]:
        return name, orjson.dumps({"type": name, **fields}).decode()

    api = "messages"
    events: list[tuple[int, tuple[str, str]]] = [
        (250 * MS, ev("message_start", message={"model": "claude"})),
        (260 * MS, ev("content_block_start", index=0)),
        (270 * MS, ev("ping")),
    ]
    offset = 600 * MS
    for i in range(30):
        if i == 15:
            events.append((offset + 6 * S, ev("ping")))
            offset += 12 * S
        delta = {"type": "text_delta", "text": f"t{i}"}
        events.append((offset, ev("content_block_delta", index=0, delta=delta)))
        offset += 40 * MS
    for name in ("content_block_stop", "message_delta", "message_stop"):
        events.append((offset, ev(name)))
        offset += 1 * MS
    marks = [stored(seq, at, name, data, api) for seq, (at, (name, data)) in enumerate(events, 1)]
    return Timeline(marks, ttfb_us=240 * MS, ttft_us=600 * MS, duration_us=offset, title="msgs")


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
    assert gaps.startswith("longest gaps: 1.53 s before #22 (content)")
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
    assert "6.00 s before" in chart.line("longest gap")


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
    assert chart.line("longest gap").startswith("longest gaps: 1h59m59s before #3 (terminal)")


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
    console.print(Timeline(marks, ttfb_us=None, ttft_us=None, duration_us=1, title=title).render())
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
    # A steady stream has no pauses to list, only its longest (equal) gap.
    assert chart.line("longest gap").startswith("longest gap: 10 µs before #")
    start = time.perf_counter()
    svg = timeline.svg()
    assert time.perf_counter() - start < 2
    assert len(svg) < 200_000
    marks_of = svg_marks(ET.fromstring(svg))
    assert sum(int(m.get("data-n", "1")) for m in marks_of) == 1_000_000


# Classification ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("event", "data", "api", "kind"),
    [
        (None, None, "messages", "ping"),
        ("ping", '{"type": "ping"}', "messages", "ping"),
        (None, '{"type": "ping"}', None, "ping"),
        ("content_block_delta", "{}", "messages", "content"),
        ("message_start", '{"type": "message_start"}', "messages", "meta"),
        ("message_delta", "{}", "messages", "meta"),
        ("message_stop", "{}", "messages", "terminal"),
        ("error", '{"type": "error"}', "messages", "error"),
        ("response.output_text.delta", "{}", "responses", "content"),
        ("response.function_call_arguments.delta", "{}", "responses", "content"),
        ("response.created", "{}", "responses", "meta"),
        ("response.completed", "{}", "responses", "terminal"),
        ("response.incomplete", "{}", "responses", "terminal"),
        ("response.failed", "{}", "responses", "error"),
        (None, '{"type": "response.output_text.delta"}', "responses", "content"),
        ("image_generation.partial_image", "{}", "images", "content"),
        ("image_generation.completed", "{}", "images", "terminal"),
        (None, "[DONE]", "chat_completions", "terminal"),
        (None, chunk({"content": "hi"}), "chat_completions", "content"),
        (None, chunk({"role": "assistant", "content": ""}), "chat_completions", "meta"),
        (None, chunk({"tool_calls": [{"index": 0}]}), None, "content"),
        (None, chunk({}, "stop"), "chat_completions", "meta"),
        (None, chunk({}, "error"), "chat_completions", "error"),
        (None, '{"error": {"message": "overloaded"}}', "chat_completions", "error"),
        ("message", chunk({"content": "x"}), "chat_completions", "content"),
        (None, "not json {", "chat_completions", "meta"),
        (None, "[1, 2]", None, "meta"),
        (None, '{"choices": "nope"}', None, "meta"),
        (None, '{"choices": [{"delta": "nope"}, 3]}', None, "meta"),
        (None, "[" * 100_000, None, "meta"),
    ],
)
def test_classify(event: str | None, data: str | None, api: str | None, kind: str) -> None:
    assert Timeline.classify(event, data, api) == kind


@given(
    st.none() | st.text(max_size=30),
    st.none() | st.text(max_size=60),
    st.sampled_from([None, "chat_completions", "responses", "messages", "images", "x"]),
)
def test_classify_never_raises(event: str | None, data: str | None, api: str | None) -> None:
    assert Timeline.classify(event, data, api) in KINDS


def test_label_of() -> None:
    assert Timeline.label_of(None, None) == ":"
    assert Timeline.label_of(None, "[DONE]") == "[DONE]"
    assert Timeline.label_of(None, "{}") == "message"
    assert Timeline.label_of("message", "{}") == "message"
    assert Timeline.label_of("message_stop", "{}") == "message_stop"


# SVG --------------------------------------------------------------------------------------------


def svg_marks(root: ET.Element) -> list[ET.Element]:
    return [e for e in root.iter(f"{SVG}line") if "mark" in e.get("class", "").split()]


def axis_x(root: ET.Element, us: int, span: int) -> float:
    axis = next(e for e in root.iter(f"{SVG}line") if e.get("id") == "axis")
    left, right = float(axis.get("x1", "")), float(axis.get("x2", ""))
    return left + us / span * (right - left)


def test_svg_chat_stream() -> None:
    timeline, span = chat_stream(title="<script>alert(1)</script> & co")
    svg = timeline.svg()
    assert "<script" not in svg and "&lt;script&gt;" in svg
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    assert root.get("viewBox") == f"0 0 {root.get('width')} {root.get('height')}"
    marks = svg_marks(root)
    assert len(marks) == 43
    # Each mark sits at its event's time on the axis and says which event it is.
    first = next(m for m in marks if m.findtext(f"{SVG}title", "").startswith("#2 message at"))
    assert float(first.get("x1", "")) == pytest.approx(axis_x(root, 412 * MS, span), abs=0.01)
    ttft = next(e for e in root.iter(f"{SVG}line") if e.get("id") == "ttft")
    assert float(ttft.get("x1", "")) == pytest.approx(axis_x(root, 412 * MS, span), abs=0.01)
    texts = [t.text or "" for t in root.iter(f"{SVG}text")]
    assert "▼ TTFT 412 ms" in texts
    assert {"meta", "content", "terminal", "0", "1 s"} <= set(texts)
    assert root.findtext(f"{SVG}title", "").startswith("<script>alert(1)</script> & co · 43")
    assert any(t.startswith("longest gaps: 1.53 s before #22") for t in texts)
    assert len([e for e in root.iter(f"{SVG}rect") if e.get("class") == "gap"]) >= 1


def test_svg_escapes_event_labels_and_survives_control_characters() -> None:
    marks = [
        Mark(1, 0, "meta", '<script>alert("x")</script>'),
        Mark(2, 10 * MS, "content\x00\x1b", "a\x01b\ud800"),
    ]
    svg = Timeline(marks, ttfb_us=None, ttft_us=None, duration_us=None, title="t\x0c").svg()
    assert "<script" not in svg
    root = ET.fromstring(svg)
    titles = [m.findtext(f"{SVG}title", "") for m in svg_marks(root)]
    assert titles[0] == '#1 <script>alert("x")</script> at 0 µs'
    assert len(titles) == 2


def test_svg_empty_and_single() -> None:
    empty = ET.fromstring(Timeline([], ttfb_us=None, ttft_us=None, duration_us=None).svg())
    assert svg_marks(empty) == []
    assert any("empty stream" in (t.text or "") for t in empty.iter(f"{SVG}text"))
    one = ET.fromstring(
        Timeline([Mark(1, 0, "content", "d")], ttfb_us=0, ttft_us=0, duration_us=0).svg()
    )
    assert len(svg_marks(one)) == 1


def test_svg_aggregates_past_5000_events() -> None:
    marks = [Mark(i, i * 997, "content", "d") for i in range(6000)]
    marks += [Mark(6000 + i, i * 3 * S, "ping", ":") for i in range(3)]
    root = ET.fromstring(Timeline(marks, ttfb_us=None, ttft_us=None, duration_us=None).svg())
    bins = svg_marks(root)
    assert len(bins) < 2000
    assert sum(int(b.get("data-n", "")) for b in bins) == 6003
    by_lane = {
        g.get("data-kind"): sum(int(b.get("data-n", "")) for b in svg_marks(g))
        for g in root.iter(f"{SVG}g")
        if g.get("class") == "lane"
    }
    assert by_lane == {"content": 6000, "ping": 3}
