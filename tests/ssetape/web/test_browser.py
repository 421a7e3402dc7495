"""The viewer in a real headless Chromium (SSETAPE_TEST_BROWSER; see conftest.py): the list
and its filters, an exchange's timeline and output, play, recorded markup that runs nothing,
and a recording that appears on an open page. A screenshot of each page is kept."""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

import httpx

from ssetape.simulator.simulator import Simulator
from tests.conftest import Proc, start_ssetape
from tests.ssetape.web.conftest import XSS, Tape, chat

ROWS = "table.exchanges tbody tr"


def test_the_list_renders_the_recorded_exchanges_and_a_filter_in_the_url_narrows_it(
    page: Any, web: Proc, tape: Tape, artifacts: Path
) -> None:
    everything = tape.exchanges()
    page.goto(web.url + "/")
    ids = page.locator(ROWS).evaluate_all("rows => rows.map(r => Number(r.dataset.id))")
    assert ids == [x.id for x in everything]
    assert page.locator(f"{ROWS}:first-child .cell.model").inner_text() == XSS
    page.screenshot(path=str(artifacts / "list.png"), full_page=True)
    page.goto(web.url + "/?model=claude")
    claude = tape.one(model="claude-sim")
    assert page.locator(ROWS).evaluate_all("rs => rs.map(r => r.dataset.id)") == [str(claude.id)]
    assert page.locator("input[name=model]").input_value() == "claude"


def test_an_exchange_page_shows_one_timeline_mark_per_event_and_the_output(
    page: Any, web: Proc, tape: Tape, artifacts: Path
) -> None:
    x = tape.one(model="gpt-4o-sim-pause")
    page.goto(f"{web.url}/exchanges/{x.id}")
    page.wait_for_selector("#timeline[data-state=loaded]")
    assert page.locator("#timeline svg .mark").count() == x.event_count
    assert page.locator("#timeline svg #ttft").count() == 1
    assert page.locator("#output").inner_text() == x.output_text
    assert page.locator("table.events tbody tr").count() == x.event_count
    page.screenshot(path=str(artifacts / "exchange.png"), full_page=True)


def test_play_writes_the_text_in_order_at_the_recorded_pace(
    page: Any, web: Proc, tape: Tape
) -> None:
    x = tape.one(model="gpt-4o-sim-pause")
    assert x.output_text and x.duration_us
    page.goto(f"{web.url}/exchanges/{x.id}")
    # Every state of the text the page goes through, as the browser writes it.
    page.evaluate("""() => {
        window.seen = [];
        const out = document.getElementById("play-out");
        new MutationObserver(() => window.seen.push(out.textContent))
            .observe(out, {childList: true, characterData: true, subtree: true});
    }""")
    page.select_option("#speed", "1")
    started = time.monotonic()
    page.click("#play")
    page.wait_for_selector("#play-out[data-state=done]", timeout=30_000)
    took = time.monotonic() - started
    seen = [s for s in page.evaluate("window.seen") if s]
    assert seen[-1] == x.output_text
    assert len(seen) > 3 and all(b.startswith(a) for a, b in itertools.pairwise(seen))
    # At 1x the text cannot be done before its last piece's offset (a lower bound only).
    last = page.evaluate(f"fetch('/exchanges/{x.id}/play').then(r => r.json())")["pieces"][-1][0]
    assert took >= last / 1e6 * 0.9


def test_recorded_markup_shows_as_text_and_runs_nothing(
    page: Any, web: Proc, tape: Tape, artifacts: Path
) -> None:
    x = tape.one(model=XSS)
    for url, shot in (("/", None), (f"/exchanges/{x.id}", "xss.png")):
        page.goto(web.url + url)
        page.wait_for_load_state("load")
        if shot:
            page.wait_for_selector("#timeline[data-state=loaded]")
        assert page.evaluate("typeof window.pwned") == "undefined"
        assert page.locator("img").count() == 0
        if shot:
            assert page.locator("#output").inner_text() == XSS
            assert page.locator("#facts").inner_text().count(XSS) == 1  # the model
            headers = page.locator("table.headers").all_inner_texts()
            assert sum(h.count(XSS) for h in headers) == 2  # a request and a response header
            page.locator("#play").click()
            page.wait_for_selector("#play-out[data-state=done]")
            assert page.locator("#play-out").inner_text() == XSS
            assert page.evaluate("typeof window.pwned") == "undefined"
            page.screenshot(path=str(artifacts / shot), full_page=True)


def test_a_recording_made_while_the_list_is_open_appears_and_grows_without_a_reload(
    page: Any, tape: Tape, artifacts: Path, tmp_path: Path
) -> None:
    db = str(tmp_path / "live.db")
    # A slow simulator: the paused stream is in flight for ~6 s, the page polls every second.
    with Simulator(speed=0.25).serve_in_thread() as sim:
        recorder = start_ssetape(
            ["record", "--mode", f"reverse:{sim.url}", "--db", db, "--port", "0",
             "--confdir", str(tape.confdir)],
            db=db,
        )  # fmt: skip
        web = start_ssetape(["web", "--db", db, "--port", "0"], db=db)
        try:
            page.goto(web.url + "/")
            assert page.locator(ROWS).count() == 0 and page.locator("#empty").count() == 1
            page.evaluate("window.sameDocument = true")
            path, body = chat("gpt-4o-sim-pause")
            with (
                httpx.Client(timeout=60) as client,
                client.stream("POST", recorder.url + path, json=body) as r,
            ):
                first = page.wait_for_selector(f"{ROWS}[data-id]", timeout=20_000)
                in_flight = first.get_attribute("data-state")
                # The exchange's own page, opened mid-stream, grows event by event.
                detail = page.context.new_page()
                detail.goto(f"{web.url}/exchanges/{first.get_attribute('data-id')}")
                detail.evaluate("window.sameDocument = true")
                events = "table.events tbody tr"
                seen_at_open = detail.locator(events).count()
                r.read()
            page.wait_for_selector(f"{ROWS}[data-state=completed]", timeout=20_000)
            assert in_flight == "recording"
            assert page.evaluate("window.sameDocument") is True  # no reload
            assert page.locator(ROWS).count() == 1 and page.locator("#empty").count() == 0
            page.screenshot(path=str(artifacts / "live.png"), full_page=True)
            detail.wait_for_selector("table.events[data-state=done]", timeout=20_000)
            assert detail.evaluate("window.sameDocument") is True
            [x] = Tape(db, tape.confdir).exchanges()
            seqs = detail.locator(events).evaluate_all("rows => rows.map(r => r.id)")
            assert seqs == [f"event-{n}" for n in range(x.event_count)]
            assert seen_at_open < x.event_count
            detail.screenshot(path=str(artifacts / "live-exchange.png"), full_page=True)
        finally:
            assert web.stop() == 0, web.log.decode()
            assert recorder.stop() == 0, recorder.log.decode()


def _console_errors(page: Any) -> list[str]:
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    return errors


def test_the_stats_page_draws_its_table_and_charts(
    page: Any, web: Proc, tape: Tape, artifacts: Path
) -> None:
    errors = _console_errors(page)
    page.goto(web.url + "/")
    page.click("nav >> text=stats")
    page.click("#by >> text=by model")
    # The click returns once the navigation commits; the new table exists only once it loads.
    page.wait_for_url("**/stats?by=model", wait_until="load")
    groups = page.locator("#groups tbody tr").evaluate_all("rs => rs.map(r => r.dataset.group)")
    assert sorted(groups) == sorted({x.model or "-" for x in tape.exchanges()})
    assert page.locator("svg.chart").count() == 3 and page.locator("g.spread").count() > 0
    assert page.evaluate("typeof window.pwned") == "undefined" and page.locator("img").count() == 0
    page.screenshot(path=str(artifacts / "stats.png"), full_page=True)
    assert errors == []


def test_compare_from_an_exchange_page_and_zoom_its_timeline(
    page: Any, web: Proc, tape: Tape, artifacts: Path
) -> None:
    errors = _console_errors(page)
    a, b = tape.one(model="gpt-4o-sim-pause"), tape.one(model="o4-mini-sim")
    page.goto(f"{web.url}/exchanges/{a.id}")
    box = page.locator("#timeline")
    page.wait_for_selector("#timeline[data-state=loaded]")
    page.click("#zoom button[data-zoom='16']")
    page.wait_for_selector("#timeline[data-zoom='16'][data-state=loaded]")
    assert page.locator("#timeline svg .mark").count() == a.event_count
    assert box.evaluate("b => b.scrollWidth > 10 * b.clientWidth")
    page.fill("#compare-with input[name=b]", str(b.id))
    page.click("#compare-with button")
    page.wait_for_url(f"**/compare?a={a.id}&b={b.id}")
    assert page.locator("#output-a").inner_text() == a.output_text
    assert page.locator("#output-b").inner_text() == b.output_text
    rows = page.locator("#compare-timeline g.row")
    assert [rows.nth(i).locator(".mark").count() for i in (0, 1)] == [a.event_count, b.event_count]
    assert page.locator("#request-diff tr[data-field=model]").count() == 1
    page.screenshot(path=str(artifacts / "compare.png"), full_page=True)
    assert errors == []
