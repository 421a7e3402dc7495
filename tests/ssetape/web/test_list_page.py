"""The list as a client reads it: the host with its port, every ending but a completed one
marked, an unknown outcome named with the known ones, and a store not recorded yet: waited
for, never created by the viewer, listed once a recorder has made it."""

from __future__ import annotations

import datetime as dt
import html
import re
from pathlib import Path

import httpx
from starlette.testclient import TestClient

from ssetape.simulator.simulator import Simulator
from ssetape.storage.models import Exchange
from ssetape.vocabulary import ExchangeState, Outcome, outcome_choices
from ssetape.web.list_page import row_html
from tests.conftest import SIM_SPEED, start_ssetape
from tests.ssetape.web.conftest import Tape, chat, record

ROW = re.compile(r'<tr data-id="(\d+)".*?</tr>', re.S)


def _rows(text: str) -> dict[int, str]:
    return {int(m.group(1)): m.group(0) for m in ROW.finditer(text)}


def test_the_host_column_keeps_a_port_that_is_not_the_schemes_own(
    client: TestClient, tape: Tape
) -> None:
    rows = _rows(client.get("/").text)
    for x in tape.exchanges():
        assert x.port not in (80, 443)  # the simulator listens on a port of its own
        assert (
            f'<span title="{x.host}:{x.port}" class="cell host">{x.host}:{x.port}</span>'
            in (rows[x.id])
        )


def _exchange(outcome: str | None, state: str) -> Exchange:
    return Exchange(
        id=1, uid="u" * 32, started_at=dt.datetime(2026, 12, 5, tzinfo=dt.UTC), method="POST",
        scheme="https", host="api.example.com", port=443, path="/v1/chat/completions",
        state=state, outcome=outcome, event_count=0,
    )  # fmt: skip


def test_every_ending_but_a_completed_one_is_marked_in_the_list(
    client: TestClient, tape: Tape
) -> None:
    # Each outcome there is, as a row of the list.
    for outcome in Outcome:
        state = {
            Outcome.RECORDING: ExchangeState.RECORDING,
            Outcome.COMPLETED: ExchangeState.COMPLETED,
        }.get(outcome, ExchangeState.COMPLETED)
        row = row_html(_exchange(outcome, state), 0)
        mark = {Outcome.COMPLETED: "ok", Outcome.RECORDING: "live"}.get(outcome, "bad")
        assert f'class="state {mark} {outcome}"' in row, outcome
        assert (f'data-mark="{mark}"' in row) and ((': not completed"' in row) == (mark == "bad"))
    # An https exchange on 443: the host alone.
    assert ">api.example.com</span>" in row_html(_exchange(None, "completed"), 0)
    # Not analysed yet: its transport's end tells.
    assert 'data-mark="bad"' in row_html(_exchange(None, ExchangeState.TRUNCATED), 0)
    # And on the page, the recorded exchanges: only the completed ones are not marked.
    rows = _rows(client.get("/").text)
    for x in tape.exchanges():
        bad = x.outcome != Outcome.COMPLETED
        assert ('data-mark="bad"' in rows[x.id]) == bad, (x.model, x.outcome)
    assert any(x.outcome != Outcome.COMPLETED for x in tape.exchanges())


def test_an_unknown_outcome_in_the_url_is_named_with_the_known_ones(
    client: TestClient, tape: Tape
) -> None:
    r = client.get("/", params={"outcome": "eror"})
    assert r.status_code == 200
    error = re.search(r'<p class="error" id="filter-error">(.*?)</p>', r.text)
    assert error is not None
    said = html.unescape(error.group(1))
    assert said.startswith("outcome 'eror' is not one of ")
    assert said.split("is not one of ")[1].split(", ") == outcome_choices()
    # Not a silent empty list: the filter is dropped, the rest of the view applies.
    assert len(_rows(r.text)) == len(tape.exchanges())
    # A known one narrows; the form offers each.
    errors = client.get("/", params={"outcome": "error"}).text
    assert "filter-error" not in errors
    assert set(_rows(errors)) == {x.id for x in tape.exchanges() if x.outcome == "error"}
    for o in Outcome:
        assert f'<option value="{o}">{o}</option>' in r.text


def test_web_on_a_store_not_recorded_yet_waits_for_it_and_lists_it_once_recorded(
    tape: Tape, tmp_path: Path
) -> None:
    db = tmp_path / "later.db"
    web = start_ssetape(["web", "--db", str(db), "--port", "0"], db=str(db))
    try:
        assert b"nothing recorded yet" in web.log
        first = httpx.get(web.url + "/", timeout=10)
        assert first.status_code == 200
        text = html.unescape(re.sub(r"<[^>]+>", "", first.text))
        assert f"nothing recorded yet: waiting for {db}" in text and not _rows(first.text)
        assert httpx.get(web.url + "/exchanges/1", timeout=10).status_code == 404
        assert not db.exists()  # the viewer creates nothing: that is the recorder's to do
        with Simulator(speed=SIM_SPEED).serve_in_thread() as sim:
            record(str(db), tape.confdir, sim.url, [chat("gpt-4o-sim")])
        [x] = Tape(str(db), tape.confdir).exchanges()
        listed = httpx.get(web.url + "/", timeout=10).text
        assert list(_rows(listed)) == [x.id] and "nothing recorded yet" not in listed
        assert httpx.get(f"{web.url}/exchanges/{x.id}", timeout=10).status_code == 200
    finally:
        assert web.stop() == 0, web.log.decode()
