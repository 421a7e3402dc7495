"""The SVG of a timeline: one mark per event (or per pixel past 5000), everything escaped."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from ssetape.views.timeline import Mark, Timeline
from ssetape.views.timeline_svg import TimelineSvg
from tests.ssetape.views.timelines import SVG, axis_x, chat_stream, svg_marks

MS = 1000
S = 1_000_000

# SVG --------------------------------------------------------------------------------------------


def test_svg_chat_stream() -> None:
    timeline, span = chat_stream(title="<script>alert(1)</script> & co")
    svg = TimelineSvg(timeline).render()
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
    assert any(t.startswith("longest gap: 1.53 s before #22") for t in texts)
    assert len([e for e in root.iter(f"{SVG}rect") if e.get("class") == "gap"]) >= 1


def test_svg_escapes_event_labels_and_survives_control_characters() -> None:
    marks = [
        Mark(1, 0, "meta", '<script>alert("x")</script>'),
        Mark(2, 10 * MS, "content\x00\x1b", "a\x01b\ud800"),
    ]
    svg = TimelineSvg(
        Timeline(marks, ttfb_us=None, ttft_us=None, duration_us=None, title="t\x0c")
    ).render()
    assert "<script" not in svg
    root = ET.fromstring(svg)
    titles = [m.findtext(f"{SVG}title", "") for m in svg_marks(root)]
    assert titles[0] == '#1 <script>alert("x")</script> at 0 µs'
    assert len(titles) == 2


def test_svg_empty_and_single() -> None:
    empty = ET.fromstring(
        TimelineSvg(Timeline([], ttfb_us=None, ttft_us=None, duration_us=None)).render()
    )
    assert svg_marks(empty) == []
    assert any("empty stream" in (t.text or "") for t in empty.iter(f"{SVG}text"))
    one = ET.fromstring(
        TimelineSvg(
            Timeline([Mark(1, 0, "content", "d")], ttfb_us=0, ttft_us=0, duration_us=0)
        ).render()
    )
    assert len(svg_marks(one)) == 1


def test_svg_aggregates_past_5000_events() -> None:
    marks = [Mark(i, i * 997, "content", "d") for i in range(6000)]
    marks += [Mark(6000 + i, i * 3 * S, "ping", ":") for i in range(3)]
    root = ET.fromstring(
        TimelineSvg(Timeline(marks, ttfb_us=None, ttft_us=None, duration_us=None)).render()
    )
    bins = svg_marks(root)
    assert len(bins) < 2000
    assert sum(int(b.get("data-n", "")) for b in bins) == 6003
    by_lane = {
        g.get("data-kind"): sum(int(b.get("data-n", "")) for b in svg_marks(g))
        for g in root.iter(f"{SVG}g")
        if g.get("class") == "lane"
    }
    assert by_lane == {"content": 6000, "ping": 3}
