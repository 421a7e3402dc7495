"""Pages that follow a recording, in a real Chromium (SSETAPE_TEST_BROWSER; see conftest.py):
an exchange's page opened mid-stream follows it to its end; a viewer started before anything
is recorded fills its list once a recorder has made the store; the list fits a laptop's
window. A screenshot of each is kept."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from ssetape.simulator.simulator import Simulator
from ssetape.storage.models import Exchange
from ssetape.web.exchange_page import EVENTS_PER_PAGE
from ssetape.web.html import ms
from tests.conftest import Proc, start_ssetape
from tests.ssetape.web.conftest import Tape, chat

ROWS = "table.exchanges tbody tr"
FACTS = "() => Object.fromEntries(Array.from(document.querySelectorAll('#facts dt'))" \
    ".map(dt => [dt.textContent, dt.nextElementSibling.textContent]))"  # fmt: skip


def _recorder(db: str, sim: Simulator, tape: Tape) -> Proc:
    return start_ssetape(
        ["record", "--mode", f"reverse:{sim.url}", "--db", db, "--port", "0",
         "--confdir", str(tape.confdir)],
        db=db,
    )  # fmt: skip


def _in_flight(db: str, tape: Tape, timeout: float = 20) -> int:
    """The id of the exchange being recorded, once some of its events are stored."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        xs = Tape(db, tape.confdir).exchanges()
        if xs and xs[0].state == "recording" and xs[0].event_count >= 2:
            return xs[0].id
        time.sleep(0.1)
    raise AssertionError("no exchange in flight")


@contextmanager
def _page_mid_stream(page: Any, tape: Tape, db: str) -> Iterator[Callable[[], Exchange]]:
    """A paused stream recorded through `ssetape record`, its exchange's page opened in
    ``page`` while it is in flight (the viewer a process of its own). Yields ``finish``: the
    rest of the stream read, the page done following it; returns the exchange stored."""
    # A slow simulator: the paused stream is in flight for ~6 s, the page polls every second.
    with Simulator(speed=0.25).serve_in_thread() as sim:
        recorder = _recorder(db, sim, tape)
        web = start_ssetape(["web", "--db", db, "--port", "0"], db=db)
        try:
            path, body = chat("gpt-4o-sim-pause")
            with (
                httpx.Client(timeout=60) as client,
                client.stream("POST", recorder.url + path, json=body) as r,
            ):
                page.goto(f"{web.url}/exchanges/{_in_flight(db, tape)}")

                def finish() -> Exchange:
                    r.read()
                    page.wait_for_selector("table.events[data-state=done]", timeout=30_000)
                    [x] = Tape(db, tape.confdir).exchanges()
                    return x

                yield finish
        finally:
            assert web.stop() == 0, web.log.decode()
            assert recorder.stop() == 0, recorder.log.decode()


def test_an_exchange_page_opened_mid_stream_follows_it_to_its_end_without_a_reload(
    page: Any, tape: Tape, artifacts: Path, tmp_path: Path
) -> None:
    with _page_mid_stream(page, tape, str(tmp_path / "live.db")) as finish:
        page.evaluate("""() => {
            window.sameDocument = true;
            window.seen = [];
            const out = document.getElementById("output");
            new MutationObserver(() => window.seen.push(out.textContent))
                .observe(out, {childList: true, characterData: true, subtree: true});
        }""")
        at_open = page.evaluate(FACTS)
        x = finish()
        assert at_open["state"] == "recording" and x.state == "completed"
        assert x.output_text and x.duration_us and x.ttft_us
        assert page.evaluate("window.sameDocument") is True  # no reload
        # The final state and figures, as a reload would show them.
        facts = page.evaluate(FACTS)
        assert facts["state"] == "completed" and facts["outcome"] == x.outcome
        assert facts["duration"] == ms(x.duration_us) and facts["TTFT"] == ms(x.ttft_us)
        assert facts["events"] == f"{x.event_count:,}"
        # The output grew with the stream, and ends as the analyzed text.
        assert page.locator("#output").inner_text() == x.output_text
        seen = [s for s in page.evaluate("window.seen") if s]
        assert len(set(seen)) > 2
        assert all(b.startswith(a) for a, b in itertools.pairwise(seen[:-1]))
        # The timeline of the whole stream, one mark per event; every event in the table.
        page.wait_for_selector("#timeline[data-state=loaded]")
        assert page.locator("#timeline svg .mark").count() == x.event_count
        assert page.locator("table.events tbody tr").count() == x.event_count
        shown = page.locator("#events-count").inner_text()
        assert shown == f"{x.event_count} of {x.event_count} events from seq 0"
        page.screenshot(path=str(artifacts / "live-exchange-done.png"), full_page=True)


def test_a_followed_stream_keeps_the_newest_rows_and_says_how_many_left(
    page: Any, tape: Tape, tmp_path: Path
) -> None:
    with _page_mid_stream(page, tape, str(tmp_path / "kept.db")) as finish:
        table = page.locator("table.events")
        # A page of events on a live page; 5 here, for a stream of a few dozen.
        assert table.get_attribute("data-keep") == str(EVENTS_PER_PAGE)
        table.evaluate("t => { t.dataset.keep = '5'; }")
        x = finish()
        n = x.event_count
        seqs = page.locator("table.events tbody tr").evaluate_all("rs => rs.map(r => r.id)")
        assert seqs == [f"event-{s}" for s in range(n - 5, n)]
        note = page.locator("#events-earlier")
        assert note.inner_text() == (
            f"… {n - 5} earlier events left this table: the event pages have them"
        )
        assert note.locator("a").get_attribute("href") == "?#events"
        assert page.locator("#events-count").inner_text() == f"5 of {n} events from seq {n - 5}"
        # The output text stays whole (the server bounds it, not the table).
        assert page.locator("#output").inner_text() == x.output_text


def test_a_viewer_started_before_the_store_exists_fills_its_list_once_a_recorder_makes_it(
    page: Any, tape: Tape, artifacts: Path, tmp_path: Path
) -> None:
    db = tmp_path / "later.db"
    web = start_ssetape(["web", "--db", str(db), "--port", "0"], db=str(db))
    try:
        page.goto(web.url + "/")
        page.evaluate("window.sameDocument = true")
        assert page.locator(ROWS).count() == 0
        assert (
            page.locator("#empty")
            .inner_text()
            .startswith(f"nothing recorded yet: waiting for {db}")
        )
        page.screenshot(path=str(artifacts / "list-waiting.png"), full_page=True)
        time.sleep(1.5)  # the open page has looked for the store more than once
        assert not db.exists()
        with Simulator(speed=1).serve_in_thread() as sim:
            recorder = _recorder(str(db), sim, tape)
            try:
                path, body = chat("gpt-4o-sim")
                httpx.post(recorder.url + path, json=body, timeout=30).read()
                page.wait_for_selector(f"{ROWS}[data-state=completed]", timeout=20_000)
            finally:
                assert recorder.stop() == 0, recorder.log.decode()
        [x] = Tape(str(db), tape.confdir).exchanges()
        assert page.evaluate("window.sameDocument") is True
        ids = page.locator(ROWS).evaluate_all("rows => rows.map(r => Number(r.dataset.id))")
        assert ids == [x.id] and page.locator("#empty").count() == 0
        page.screenshot(path=str(artifacts / "list-filled.png"), full_page=True)
    finally:
        assert web.stop() == 0, web.log.decode()


def test_the_list_fits_a_1280_px_window_and_marks_what_did_not_complete(
    page: Any, web: Proc, tape: Tape, artifacts: Path
) -> None:
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(web.url + "/")
    page.wait_for_load_state("load")
    width = page.evaluate("document.documentElement.scrollWidth")
    table = page.evaluate("document.querySelector('table.exchanges').getBoundingClientRect().right")
    page.screenshot(path=str(artifacts / "list-1280.png"), full_page=True)
    assert width <= page.evaluate("document.documentElement.clientWidth") and table <= 1280
    # The host with its port, as a URL names it.
    for x in tape.exchanges():
        cell = page.locator(f"{ROWS}[data-id='{x.id}'] .cell.host")
        assert cell.inner_text() == f"{x.host}:{x.port}"
    # Every row that did not complete: a ✗ and red; a completed one neither.
    marks = page.locator(f"{ROWS} .state").evaluate_all("""spans => spans.map(s => [
        s.closest('tr').dataset.outcome, getComputedStyle(s, '::before').content,
        getComputedStyle(s).color])""")
    assert {o for o, _, _ in marks} != {"completed"}
    for outcome, before, color in marks:
        bad = outcome != "completed"
        assert (before == '"✗ "') == bad and (color == "rgb(185, 28, 28)") == bad, outcome
