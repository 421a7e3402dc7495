"""Cassette age and orphans: recordings older than --ssetape-max-age (or the marker's max_age)
are reported, and re-recorded in record mode once; recordings no test replayed are listed after
a full run, and not after a selection."""

from __future__ import annotations

import datetime as dt
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from ssetape.simulator.simulator import Simulator
from ssetape.testing.age import describe_age, parse_age, recorded_dates
from tests.conftest import SIM_SPEED
from tests.ssetape.testing.hygiene_cassettes import (
    UPSTREAM,
    chat,
    exchange,
    run_pytest,
    write_cassette,
)

NOW = dt.datetime.now(dt.UTC)
OLD = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
TESTS = f'''
import httpx, pytest


def ask(ssetape, content):
    body = {{"model": "m", "user": "u1", "messages": [{{"role": "user", "content": content}}]}}
    return httpx.post(ssetape.base_url("{UPSTREAM}") + "/v1/chat/completions", json=body)


def test_old(ssetape):
    assert ask(ssetape, "old").status_code == 200


def test_fresh(ssetape):
    assert ask(ssetape, "fresh").status_code == 200


@pytest.mark.ssetape(max_age="30d")
def test_marker(ssetape):
    assert ask(ssetape, "marker").status_code == 200
'''


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "cassettes" / "test_age"
    # Two recordings, one of which no test asks for any more.
    write_cassette(
        folder / "test_old.jsonl",
        [exchange(chat("old"), started_at=OLD), exchange(chat("older"), started_at=OLD)],
    )
    write_cassette(
        folder / "test_fresh.jsonl", [exchange(chat("fresh"), started_at=NOW - dt.timedelta(1))]
    )
    # No started_at (as the plugin writes cassettes): the response's Date header dates it.
    date = format_datetime(NOW - dt.timedelta(days=40), usegmt=True)
    write_cassette(folder / "test_marker.jsonl", [exchange(chat("marker"), date=date)])
    # The cassette of a test that was removed.
    write_cassette(folder / "test_removed.jsonl", [exchange(chat("gone"))])
    (tmp_path / "test_age.py").write_text(TESTS)
    return tmp_path


def _json(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = orjson.loads(path.read_bytes())
    return doc


def test_max_age_reports_old_cassettes_and_orphans(project: Path) -> None:
    out = project / "report.json"
    result = run_pytest(project, "--ssetape-max-age", "90d", "--ssetape-drift-json", str(out))
    text = result.stdout
    assert "3 passed" in text, text + result.stderr
    section = text[text.index("cassettes older than the max age") :]
    folder = project / "cassettes" / "test_age"
    assert f"{folder / 'test_old.jsonl'}: recorded 2020-01-01, " in section
    assert "(max 90d), replayed as it is" in section
    # The marker's limit wins over the command line's: 40 days is more than 30.
    assert f"{folder / 'test_marker.jsonl'}: recorded " in section
    assert "40d old (max 30d)" in section
    assert "test_fresh.jsonl" not in section.split("recordings no test replayed")[0]

    doc = _json(out)
    assert sorted(Path(s["cassette"]).name for s in doc["stale"]) == [
        "test_marker.jsonl", "test_old.jsonl"
    ]  # fmt: skip
    assert all(not s["rerecorded"] for s in doc["stale"])

    # The full run replayed every test: what none was served is listed, per cassette.
    orphans = text[text.index("recordings no test replayed") :]
    assert f"{folder / 'test_old.jsonl'}:\n  cassette line 3: POST api.example.com/v1/chat" in (
        orphans
    )
    assert f"{folder / 'test_removed.jsonl'}:\n  cassette line 2: POST" in orphans
    assert "test_fresh.jsonl" not in orphans and "test_marker.jsonl" not in orphans
    listed = {
        Path(o["cassette"]).name: [r["line"] for r in o["recordings"]] for o in doc["orphans"]
    }
    assert listed == {"test_old.jsonl": [3], "test_removed.jsonl": [2]}


def test_orphans_under_xdist(project: Path) -> None:
    result = run_pytest(project, "--ssetape-drift", "-n", "2")
    assert "3 passed" in result.stdout, result.stdout + result.stderr
    orphans = result.stdout[result.stdout.index("recordings no test replayed") :]
    assert "test_old.jsonl:\n  cassette line 3:" in orphans and "test_removed.jsonl" in orphans
    assert "test_fresh.jsonl" not in orphans


@pytest.mark.parametrize(
    ("selection", "why"),
    [
        (["-k", "old"], "2 test(s) deselected"),
        (["test_age.py::test_old"], "tests selected by node id"),
    ],
)
def test_no_orphans_after_a_selection(project: Path, selection: list[str], why: str) -> None:
    result = run_pytest(project, "--ssetape-drift", *selection)
    assert "1 passed" in result.stdout, result.stdout
    assert f"recordings no test replayed are not listed: {why}" in result.stdout
    assert "test_removed.jsonl" not in result.stdout


def test_a_bad_max_age_is_a_usage_error(project: Path) -> None:
    result = run_pytest(project, "--ssetape-max-age", "soon")
    assert result.returncode == pytest.ExitCode.USAGE_ERROR
    assert "--ssetape-max-age: max age 'soon': use a positive number and a unit" in result.stderr
    assert parse_age("2w") == dt.timedelta(days=14) and parse_age("12h").total_seconds() == 43200


@pytest.mark.timeout(300)  # three pytest runs, one of them recording through mitmproxy
def test_record_mode_once_re_records_an_old_cassette(tmp_path: Path, confdir: Path) -> None:
    cassette = tmp_path / "cassettes" / "test_sim" / "test_chat.jsonl"
    with Simulator(speed=SIM_SPEED).serve_in_thread() as sim:
        (tmp_path / "test_sim.py").write_text(f'''
import httpx

def test_chat(ssetape):
    body = {{"model": "sim-chat", "messages": [{{"role": "user", "content": "hi"}}]}}
    r = httpx.post(ssetape.base_url("{sim.url}") + "/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == 200
''')
        # Recorded in 2020 from another host: once would replay it, and the request miss.
        write_cassette(cassette, [exchange(chat("hi"), started_at=OLD)])
        args = ["--ssetape-confdir", str(confdir), "--ssetape-record-mode", "once"]
        result = run_pytest(tmp_path, *args, "--ssetape-max-age", "90d")
        text = result.stdout
        assert "1 passed" in text, text + result.stderr
        assert f"{cassette}: recorded 2020-01-01, " in text and "old (max 90d), re-recorded" in text
        # The new recording replaced the old one, and the report says the content changed.
        assert "re-recorded cassettes that changed beyond timing" in text
        assert f"{cassette}: 1 of 1 recording(s) differ beyond timing" in text
    # Format 2 writes no started_at: a recording is dated by its response's Date header,
    # which the simulator does not send. The 2020 date went with the old recording.
    assert OLD not in recorded_dates(cassette.read_bytes().splitlines())
    assert b"api.example.com" not in cassette.read_bytes()

    # Replayed with the simulator gone: recent enough, not reported.
    result = run_pytest(tmp_path, "--ssetape-confdir", str(confdir), "--ssetape-max-age", "90d")
    assert "1 passed" in result.stdout, result.stdout
    assert "older than the max age" not in result.stdout


def test_max_age_names_a_cassette_it_cannot_date(tmp_path: Path) -> None:
    """No started_at, no Date header (what the plugin records from an upstream that sends
    none): the age is unknown, and the run says so, naming the cassette, instead of passing
    it as fresh in silence."""
    cassette = tmp_path / "cassettes" / "test_age" / "test_old.jsonl"
    write_cassette(cassette, [exchange(chat("old"))])
    (tmp_path / "test_age.py").write_text(TESTS)
    result = run_pytest(tmp_path, "--ssetape-max-age", "90d", "-k", "test_old")
    assert "1 passed" in result.stdout, result.stdout + result.stderr
    assert f"{cassette}: no recording in it is dated" in result.stdout
    assert "age is unknown to --ssetape-max-age 90d" in result.stdout
    assert "older than the max age" not in result.stdout


@pytest.mark.parametrize(
    ("age_s", "limit", "said"),
    [(5, "1s", "5.0s"), (3 * 3600, " 1h ", "3.0h"), (40 * 86400, "30d", "40d"),
     (0.3, "1s", "0.3s"), (400 * 86400, "52w", "57w")],
)  # fmt: skip
def test_an_age_is_told_in_the_unit_of_its_limit(age_s: float, limit: str, said: str) -> None:
    assert describe_age(age_s, limit) == said
