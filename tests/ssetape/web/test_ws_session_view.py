"""The viewer's page of a recorded WebSocket session: the two-lane timeline as inline SVG
(client frames above, server frames below, the turns under them), the turns table, the
frames each saying who sent them, and every recorded string escaped."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from ssetape.simulator.ws_realtime import DELTAS
from ssetape.simulator.ws_wire import DELAY
from tests.conftest import start_ssetape
from tests.ssetape.views.ws_sessions import Recorded, recorded, within_ms
from tests.ssetape.web.conftest import XSS, app_client

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def tape(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    return recorded(tmp_path_factory)


@pytest.fixture(scope="module")
def viewer(tape: Recorded) -> Iterator[TestClient]:
    yield from app_client(tape.db)


def page_of(viewer: TestClient, tape: Recorded, name: str) -> str:
    r = viewer.get(f"/exchanges/{tape.ids[name]}")
    assert r.status_code == 200
    return r.text


def part(html: str, start: str, tag: str) -> ET.Element:
    """The element that begins at ``start`` in the page, parsed (the viewer writes XML-clean
    markup: every value escaped, every element closed)."""
    at = html.index(start)
    return ET.fromstring(html[at : html.index(f"</{tag}>", at) + len(tag) + 3])


def lanes_of(html: str) -> dict[str, ET.Element]:
    svg = part(html, "<svg", "svg")
    return {g.get("data-lane", ""): g for g in svg.iter(f"{SVG}g") if g.get("data-lane")}


def marks(g: ET.Element) -> list[ET.Element]:
    return [m for m in g.iter(f"{SVG}line") if "mark" in (m.get("class") or "")]


def turn_rows(html: str) -> list[dict[str, Any]]:
    table = part(html, '<table class="turns"', "table")
    rows = []
    for tr in table.iter("tr"):
        if tr.get("class") == "turn":
            cells = ["".join(td.itertext()) for td in tr.iter("td")]
            rows.append({"turn": tr.get("data-turn"), "ttft_us": tr.get("data-ttft-us"),
                         "outcome": tr.get("data-outcome"), "cells": cells})  # fmt: skip
    return rows


def test_the_page_draws_the_client_lane_above_the_server_lane(
    viewer: TestClient, tape: Recorded
) -> None:
    html = page_of(viewer, tape, "two")
    fake = tape.sent["two"]
    lanes = lanes_of(html)
    assert list(lanes) == ["client", "server"]  # in this order, top down
    client, server = lanes["client"], lanes["server"]
    assert client.get("data-frames") == str(len(fake.received)) == "2"
    assert server.get("data-frames") == str(len(fake.sent))
    assert len(marks(client)) == 2 and len(marks(server)) == len(fake.sent)
    ys = [float(marks(g)[0].get("y1", "0")) for g in (client, server)]
    assert ys[0] < ys[1]
    content = [m for m in marks(server) if m.get("class") == "mark content"]
    assert len(content) == 2 * len(DELTAS)
    # Each turn on the axis starts at its ask.
    svg = part(html, "<svg", "svg")
    bars = [g for g in svg.iter(f"{SVG}g") if g.get("class") == "turn"]
    assert [g.get("data-turn") for g in bars] == ["1", "2"]
    for bar, ask in zip(bars, marks(client), strict=True):
        first = next(bar.iter(f"{SVG}rect"))
        assert float(first.get("x", "0")) == pytest.approx(float(ask.get("x1", "0")), abs=0.01)


def test_the_turns_table(viewer: TestClient, tape: Recorded) -> None:
    html = page_of(viewer, tape, "two")
    rows = turn_rows(html)
    assert [r["turn"] for r in rows] == ["1", "2"]
    for r in rows:
        assert r["outcome"] == "completed"
        assert within_ms(int(r["ttft_us"]) / 1000, DELAY)
        assert r["cells"][-1] == "completed"
    assert "Turns (2)" in html
    # The frames below say who sent each.
    assert re.search(r'<td class="from-client">client</td><td>response.create</td>', html)


def test_a_server_error_turn_shows_its_outcome(viewer: TestClient, tape: Recorded) -> None:
    html = page_of(viewer, tape, "error")
    [row] = turn_rows(html)
    assert row["outcome"] == "error" and row["cells"][-1] == "error (server_error)"
    svg = part(html, "<svg", "svg")
    [bar] = [g for g in svg.iter(f"{SVG}g") if g.get("class") == "turn"]
    assert bar.get("data-outcome") == "error"
    fills = [r.get("fill") for r in bar.iter(f"{SVG}rect")]
    assert fills[-1] == "#dc2626"  # red once the first content came
    assert "server_error" in "".join(bar.itertext())  # its tooltip says why


def test_recorded_strings_are_escaped(viewer: TestClient, tape: Recorded) -> None:
    """A client frame whose kind is markup, a model named so: text on the page, in the SVG
    (a mark's tooltip) and in the downloaded image alike."""
    html = page_of(viewer, tape, "hostile")
    assert XSS not in html
    assert "&lt;script&gt;window.pwned=1&lt;/script&gt;" in html
    client = lanes_of(html)["client"]
    tips = ["".join(m.itertext()) for m in marks(client)]
    assert any(XSS in tip for tip in tips)  # escaped in the page, read back as the text
    r = viewer.get(f"/exchanges/{tape.ids['hostile']}/download/svg")
    assert r.status_code == 200 and XSS not in r.text
    image = ET.fromstring(r.text)  # well-formed: nothing recorded broke out of its element
    # The downloaded timeline has the session's two lanes too, client above server.
    kinds = [g.get("data-kind") for g in image.iter(f"{SVG}g") if g.get("data-kind")]
    assert kinds == ["client", "server"]


def test_in_a_browser_nothing_recorded_runs(tape: Recorded, page: Any) -> None:
    """Chromium on `ssetape web`: the hostile session's page runs none of its strings, and
    the timeline's lanes are there."""
    proc = start_ssetape(["web", "--db", tape.db, "--port", "0"], db=tape.db)
    try:
        page.goto(f"{proc.url}/exchanges/{tape.ids['hostile']}")
        page.wait_for_selector("#ws-timeline svg")
        assert page.evaluate("window.pwned") is None
        lanes = page.eval_on_selector_all(
            "#ws-timeline g.lane", "gs => gs.map(g => g.dataset.lane)"
        )
        assert lanes == ["client", "server"]
        assert page.locator("table.turns tr.turn").count() == 1
    finally:
        assert proc.stop() == 0, proc.log.decode()
