"""Timelines for the views' tests: streams of marks, and charts read back as text."""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET
from dataclasses import dataclass

import orjson
from rich.cells import cell_len
from rich.console import Console

from ssetape.views.timeline import Mark, Timeline
from ssetape.views.timeline_chart import TimelineChart

MS = 1000
S = 1_000_000
SVG = "{http://www.w3.org/2000/svg}"


def text_of(timeline: Timeline, width: int = 80) -> list[str]:
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(TimelineChart(timeline).render(width))
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


SVG = "{http://www.w3.org/2000/svg}"


def svg_marks(root: ET.Element) -> list[ET.Element]:
    return [e for e in root.iter(f"{SVG}line") if "mark" in e.get("class", "").split()]


def axis_x(root: ET.Element, us: int, span: int) -> float:
    axis = next(e for e in root.iter(f"{SVG}line") if e.get("id") == "axis")
    left, right = float(axis.get("x1", "")), float(axis.get("x2", ""))
    return left + us / span * (right - left)
