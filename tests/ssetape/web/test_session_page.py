"""The session page and the list's session column, as a client reads them: a real recording
with two sessions (one named with markup, one with the characters a URL must quote) and a call
of no session."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from starlette.testclient import TestClient

from ssetape.cost.price import format_usd
from ssetape.simulator.simulator import Simulator
from ssetape.web.app import CSP
from tests.conftest import SIM_SPEED, start_ssetape
from tests.ssetape.web.conftest import XSS, Tape, app_client, chat, record

# A pytest node id: slashes, brackets and what a URL would read as a query or a fragment.
RUN = "tests/test_app.py::test_chat[a b/c?x=1#frag]"
HOSTILE = f"{XSS} & more"
# gpt-4o-mini is a model genai-prices prices (the simulator answers any name); the other two
# are not, so the session's cost leaves two calls out.
RUN_MODELS = ["gpt-4o-mini", "gpt-4o-sim-error", "claude-sim"]


def record_sessions(db: str, confdir: Path) -> Tape:
    """RUN's three calls (one failing), HOSTILE's two, and one call of no session."""
    confdir.mkdir(parents=True, exist_ok=True)
    claude = ("/v1/messages", {"model": "claude-sim", "max_tokens": 40, "stream": True,
                               "messages": [{"role": "user", "content": "hi"}]})  # fmt: skip
    with Simulator(speed=SIM_SPEED).serve_in_thread() as sim:
        record(db, confdir, sim.url, [chat(RUN_MODELS[0]), chat(RUN_MODELS[1]), claude],
               headers={"x-ssetape-session": RUN})  # fmt: skip
        record(db, confdir, sim.url, [chat("gpt-4o-sim"), chat("gpt-4o-sim-pause")],
               headers={"x-ssetape-session": HOSTILE})  # fmt: skip
        record(db, confdir, sim.url, [chat("gpt-4o-sim")])
    return Tape(db, confdir)


@pytest.fixture(scope="module")
def sessions_tape(tmp_path_factory: pytest.TempPathFactory) -> Tape:
    folder = tmp_path_factory.mktemp("sessions")
    return record_sessions(str(folder / "tape.db"), folder / "confdir")


@pytest.fixture(scope="module")
def client(sessions_tape: Tape) -> Iterator[TestClient]:
    yield from app_client(sessions_tape.db)


def _href(name: str) -> str:
    return f"/session/{quote(name, safe='')}"


def test_the_list_names_each_calls_session_and_links_to_its_page(
    client: TestClient, sessions_tape: Tape
) -> None:
    page = client.get("/").text
    assert "<th>session</th>" in page
    for x in sessions_tape.exchanges():
        row = re.search(rf'<tr data-id="{x.id}".*?</tr>', page)
        assert row is not None
        if x.session is None:
            assert "/session/" not in row.group(0)
        else:
            assert f'href="{html.escape(_href(x.session))}"' in row.group(0)
    assert XSS not in page and "&lt;script&gt;window.pwned=1&lt;/script&gt;" in page


def test_a_session_page_draws_its_calls_on_one_timeline_with_totals_that_add_up(
    client: TestClient, sessions_tape: Tape
) -> None:
    calls = sorted(
        (x for x in sessions_tape.exchanges() if x.session == RUN), key=lambda x: x.started_at
    )
    assert [x.model for x in calls] == RUN_MODELS
    r = client.get(_href(RUN))
    assert r.status_code == 200 and r.headers["content-security-policy"] == CSP
    page = r.text
    # One row per call in start order, each a link to its exchange, its bar from its start.
    rows = re.findall(r'<a href="/exchanges/(\d+)"><g class="call"[^>]*data-offset-us="(\d+)"',
                      page)  # fmt: skip
    assert [int(i) for i, _ in rows] == [x.id for x in calls]
    first = calls[0].started_at
    offsets = [int(o) for _, o in rows]
    assert offsets == [round((x.started_at - first).total_seconds() * 1e6) for x in calls]
    assert offsets[0] == 0 and offsets == sorted(offsets)
    assert page.count('class="ttfb"') == sum(x.ttfb_us is not None for x in calls)
    assert page.count('class="ttft"') == sum(x.ttft_us is not None for x in calls)

    totals = dict(re.findall(r'<dt>([^<]+)</dt><dd data-value="(-?\d+)"', page))
    assert int(totals["calls"]) == 3
    assert int(totals["failed"]) == 1  # gpt-4o-sim-error
    assert int(totals["tokens in"]) == sum(x.input_tokens or 0 for x in calls) > 0
    assert int(totals["tokens out"]) == sum(x.output_tokens or 0 for x in calls) > 0
    assert int(totals["waiting on first tokens"]) == sum(x.ttft_us or 0 for x in calls)
    last_end = max(x.started_at.timestamp() * 1e6 + (x.duration_us or 0) for x in calls)
    assert int(totals["wall time"]) == round(last_end - first.timestamp() * 1e6)
    # The cost: exact nano-dollars over the priced calls; claude-sim has no price, and the
    # total says it leaves one call out.
    priced = [x.cost_nusd for x in calls if x.cost_nusd is not None]
    assert len(priced) == 1 and int(totals["cost"]) == sum(priced)
    assert "(2 without a price)" in page
    # The session's name is shown as text (also the title).
    assert f"<h1>Session <code>{html.escape(RUN)}</code></h1>" in page


def test_a_session_named_with_markup_is_shown_as_text(client: TestClient) -> None:
    page = client.get(_href(HOSTILE)).text
    assert XSS not in page and not re.search(r"<img\b|onerror=\"", page)
    assert re.findall(r"<script[^>]*>", page) == ['<script src="/static/app.js" defer>']
    assert "&lt;script&gt;window.pwned=1&lt;/script&gt;" in page
    assert len(re.findall(r'<g class="call"', page)) == 2


def test_an_unknown_session_is_404_and_the_calls_come_in_pages(
    client: TestClient, sessions_tape: Tape, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert client.get("/session/no-such-session").status_code == 404
    from ssetape.web import session_page

    monkeypatch.setattr(session_page, "CALLS_PER_PAGE", 2)
    first = client.get(_href(RUN)).text
    ids = re.findall(r'<a href="/exchanges/(\d+)"><g class="call"', first)
    assert len(ids) == 2
    later = re.search(r'<a href="([^"]+)" rel="next"', first)
    assert later is not None
    second = client.get(html.unescape(later.group(1))).text
    more = re.findall(r'<a href="/exchanges/(\d+)"><g class="call"', second)
    assert len(more) == 1 and not set(more) & set(ids)
    # Totals stay the session's, whatever page.
    assert re.search(r'<dt>calls</dt><dd data-value="3"', second)


def test_in_a_browser_a_session_runs_nothing_and_its_rows_open_their_exchanges(
    page: Any, sessions_tape: Tape, artifacts: Path
) -> None:
    web = start_ssetape(["web", "--db", sessions_tape.db, "--port", "0"], db=sessions_tape.db)
    try:
        page.goto(web.url + "/")
        # From the list's session column: the newest call with a session is HOSTILE's.
        page.locator("table.exchanges td a[href^='/session/']").first.click()
        page.wait_for_url("**/session/**")
        assert page.locator("h1 code").inner_text() == HOSTILE
        assert page.evaluate("window.pwned") is None
        assert page.locator("svg g.call").count() == 2
        page.goto(web.url + _href(RUN))
        assert page.locator("h1 code").inner_text() == RUN
        page.screenshot(path=str(artifacts / "session.png"), full_page=True)
        first = sorted((x for x in sessions_tape.exchanges() if x.session == RUN),
                       key=lambda x: (x.started_at, x.id))[0]  # fmt: skip
        page.locator("svg a").first.click()
        page.wait_for_url(f"**/exchanges/{first.id}")
    finally:
        assert web.stop() == 0, web.log.decode()


def test_cost_shows_in_the_list_the_exchange_and_the_stats(
    client: TestClient, sessions_tape: Tape
) -> None:
    priced = sessions_tape.one(model=RUN_MODELS[0])
    unknown = sessions_tape.one(model="claude-sim")  # no model genai-prices knows
    assert priced.cost_nusd and unknown.cost_nusd is None and unknown.price_note
    row = _row(client.get("/").text, priced.id)
    assert f"<span>{format_usd(priced.cost_nusd)}</span>" in row or (
        f">{format_usd(priced.cost_nusd)}</span>" in row
    )
    assert ">no price</span>" in _row(client.get("/").text, unknown.id)
    page = client.get(f"/exchanges/{unknown.id}").text
    assert "<dt>cost</dt><dd>no price: model claude-sim not in genai-prices" in page
    stats = client.get("/stats", params={"by": "model"}).text
    group = re.search(rf'<tr data-group="{RUN_MODELS[0]}">(.*?)</tr>', stats)
    assert group and f'data-value="{priced.cost_nusd}"' in group.group(1)
    claude = re.search(r'<tr data-group="claude-sim">(.*?)</tr>', stats)
    assert claude and ">no price</span>" in claude.group(1) and "$0<" not in claude.group(1)


def _row(html: str, xid: int) -> str:
    found = re.search(rf'<tr data-id="{xid}"(.*?)</tr>', html, re.S)
    assert found
    return found.group(1)
