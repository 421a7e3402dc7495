"""One store, every surface: the CLI, the web viewer, the MCP server and the pytest plugin's
record report the same longest gap, TTFT and count of failed exchanges (docs/FIGURES.md).

The store is recorded through `ssetape record` from the simulator at its real speed, so the
pause is the simulator's 1.5 s with a ``: keep-alive`` comment every 0.5 s inside it: a
surface that counted the comments as progress would see gaps of 0.5 s."""

from __future__ import annotations

import html
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

from ssetape.simulator.simulator import Simulator
from ssetape.storage.models import Exchange
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from ssetape.testing.stream_checks import assert_no_gap_over
from ssetape.testing.stream_record import read_records
from ssetape.views.timeline import fmt_us
from ssetape.vocabulary import fault_choices
from ssetape.web.app import create_app
from tests.conftest import SSETAPE
from tests.ssetape.mcp_server.client import call, error, in_memory, tools
from tests.ssetape.web.conftest import chat, record

FAULTS = fault_choices()


def _cli(*args: str) -> str:
    r = subprocess.run([SSETAPE, *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("figures")
    db = str(folder / "tape.db")
    with Simulator(speed=1).serve_in_thread() as sim:
        record(db, folder / "confdir", sim.url, [
            chat("gpt-4o-sim"), chat("gpt-4o-sim-pause"), chat("gpt-4o-sim-error"),
            chat("gpt-4o-sim-429"), chat("gpt-4o-sim-refusal"),
        ])  # fmt: skip
    yield db


def _paused(db: str) -> Exchange:
    store = Store.open(db)
    try:
        [x] = [x for x in Queries(store).exchanges() if x.model == "gpt-4o-sim-pause"]
        return x
    finally:
        store.close()


def test_every_surface_tells_one_longest_gap_and_ttft(db: str) -> None:
    x = _paused(db)
    gap_us, ttft_us = x.gap_max_us, x.ttft_us
    assert gap_us is not None and ttft_us is not None
    # The pause itself, not a stretch between two of its keep-alive comments.
    assert 1_400_000 <= gap_us <= 2_500_000, gap_us

    # CLI: show --json, the terminal timeline, the SVG.
    shown = orjson.loads(_cli("show", "--db", db, str(x.id), "--json"))
    assert shown["gap_ms"]["max"] == round(gap_us / 1000, 3)
    assert shown["ttft_ms"] == round(ttft_us / 1000, 3)
    timeline = _cli("show", "--db", db, str(x.id), "--timeline")
    # The longest is listed first (other gaps a chart shows as empty cells may follow).
    line = next(li for li in timeline.splitlines() if li.startswith("longest gap"))
    assert re.match(rf"longest gaps?: {re.escape(fmt_us(gap_us))} before #", line), line
    assert f"TTFT {fmt_us(ttft_us)}" in timeline

    # Web: the exchange page's figures and its timeline.
    store = Store.open(db)
    try:
        with TestClient(create_app(Queries(store))) as web:
            page = web.get(f"/exchanges/{x.id}").text
            svg = web.get(f"/exchanges/{x.id}/timeline").text

        # MCP: the exchange's analysis, and the stall finder with its default threshold.
        async def body(client: Any) -> dict[str, Any]:
            return {
                "one": await call(client, "get_exchange", id=x.id),
                "stalls": await call(client, "find_stalls"),
            }

        mcp = in_memory(store, body)
        # The plugin: a record of the exchange and its gap assertion.
        [rec] = read_records(Queries(store), [x.id], {})
    finally:
        store.close()
    assert f"/ {fmt_us(gap_us)}</" in page, "the page's gap median / p95 / max"
    # The events table's time between rows counts keep-alives: it is not called a gap.
    assert "<th>since prev</th>" in page and "<th>gap</th>" not in page
    assert re.search(rf"longest gaps?: {re.escape(fmt_us(gap_us))} before #", svg)
    gaps = mcp["one"]["analysis"]["gap_ms"]
    assert gaps["max"] == round(gap_us / 1000, 3)
    [stall] = [s for s in mcp["stalls"]["stalls"] if s["exchange"]["id"] == x.id]
    assert stall["gap_max_ms"] == round(gap_us / 1000, 3)
    assert stall["pauses_found"] == 1
    assert stall["pauses"][0]["gap_ms"] == round(gap_us / 1000, 3)
    assert rec.gaps.max_ms == gap_us / 1000 and rec.ttft_ms == ttft_us / 1000
    with pytest.raises(AssertionError, match=rf"gap of {gap_us / 1000:.1f} ms before"):
        assert_no_gap_over(rec, 1000)


def test_every_surface_counts_the_same_failed_exchanges(db: str) -> None:
    stats = orjson.loads(_cli("stats", "--db", db, "--json"))
    [everything] = stats
    failed = orjson.loads(_cli("list", "--db", db, "--outcome", "failed", "--json"))
    # The mid-stream error and the 429; a refusal is no failure.
    assert sorted(r["outcome"] for r in failed) == ["error", "http_error"]
    assert everything["failed"] == len(failed) == 2
    table = _cli("stats", "--db", db)
    assert re.search(r"\bfailed\b", table) and not re.search(r"\berrors\b", table)

    store = Store.open(db)
    try:
        with TestClient(create_app(Queries(store))) as web:
            listed = web.get("/", params={"outcome": "failed"}).text
            stats_page = web.get("/stats").text
            bad = web.get("/", params={"outcome": "errors"})

        async def body(client: Any) -> dict[str, Any]:
            return {
                "stats": await call(client, "stats"),
                "failed": await call(client, "list_exchanges", outcome="failed"),
            }

        mcp = in_memory(store, body)
    finally:
        store.close()
    rows = {int(i) for i in re.findall(r'<tr data-id="(\d+)"', listed)}
    assert rows == {r["id"] for r in failed}
    assert "failed" in stats_page
    assert "not one of" in bad.text and "failed" in bad.text  # named, with the valid ones
    [group] = mcp["stats"]["groups"]
    assert group["failed"] == 2
    assert sorted(r["id"] for r in mcp["failed"]["exchanges"]) == sorted(r["id"] for r in failed)


def test_every_surface_counts_the_same_failures_of_each_fault(db: str) -> None:
    """Whose failures a count counts (docs/FIGURES.md): `stats --fault`, `list --fault`, the
    viewer's ``?fault=`` and MCP's ``fault`` agree, fault by fault, and refuse the unknown."""
    cli = {f: orjson.loads(_cli("stats", "--db", db, "--json", "--fault", f)) for f in FAULTS}
    listed = {
        f: {r["id"] for r in orjson.loads(_cli("list", "--db", db, "--outcome", "failed",
                                              "--fault", f, "--json"))}
        for f in FAULTS
    }  # fmt: skip
    # The simulator's error event and its 429 are the provider's; nothing else failed.
    assert [len(listed[f]) for f in FAULTS] == [2, 0, 0, 0, 2]
    assert {f: g["failed"] for f, [g] in cli.items()} == {f: len(ids) for f, ids in listed.items()}
    assert cli["any"][0]["faults"] == {"provider": 2, "client": 0, "network": 0, "ssetape": 0}
    store = Store.open(db)
    try:
        with TestClient(create_app(Queries(store))) as web:
            pages = {f: web.get("/", params={"outcome": "failed", "fault": f}).text for f in FAULTS}
            stats_pages = {f: web.get("/stats", params={"fault": f}).text for f in FAULTS}
            bad_list = web.get("/", params={"fault": "recorder"}).text
            bad_stats = web.get("/stats", params={"fault": "recorder"}).text

        async def body(client: Any) -> dict[str, Any]:
            got: dict[str, Any] = {"bad": await error(client, "list_exchanges", fault="x")}
            listed = await tools(client)
            got["offered"] = [
                listed[name]["inputSchema"]["properties"]["fault"]
                for name in ("list_exchanges", "stats")
            ]
            for f in FAULTS:
                got[f] = (await call(client, "list_exchanges", outcome="failed", fault=f),
                          await call(client, "stats", fault=f))  # fmt: skip
            return got

        mcp = in_memory(store, body)
    finally:
        store.close()
    for f in FAULTS:
        assert {int(i) for i in re.findall(r'<tr data-id="(\d+)"', pages[f])} == listed[f]
        [row] = re.findall(r'<tr data-group="all">(.*?)</tr>', stats_pages[f])
        assert re.findall(r"<td>(.*?)</td>", row)[2] == str(len(listed[f]))
        found, stats = mcp[f]
        assert {r["id"] for r in found["exchanges"]} == listed[f]
        assert stats["fault"] == f and stats["groups"][0]["failed"] == len(listed[f])
    # What MCP offers an agent is the vocabulary, whole.
    assert mcp["offered"][0]["anyOf"][0]["enum"] == mcp["offered"][1]["enum"] == FAULTS
    choices = "is not one of provider, client, network, ssetape, any"
    assert f"'x' {choices}" in mcp["bad"]
    for page in (bad_list, bad_stats):  # named on the page, the rest of it shown
        assert f"'recorder' {choices}" in html.unescape(page)


def test_the_figures_are_written_down() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "FIGURES.md").read_text()
    for word in ("TTFT", "gap", "duration", "failed", "keep-alive", "micro-dollar", "fault"):
        assert word in doc
