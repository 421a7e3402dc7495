"""The pytest plugin's record modes over a cassette that is already there: new_episodes adds
what is missing, and a recording that failed (the upstream was down) never sticks."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import httpx  # noqa: F401

# Imported here, before pytester snapshots sys.modules (see test_pytest_plugin).
import mitmproxy.certs  # noqa: F401
import orjson
import pytest

import ssetape.testing.tape_session  # noqa: F401
from ssetape.simulator.simulator import Simulator
from tests.conftest import SIM_SPEED, SSETAPE

pytest_plugins = ["pytester"]

TESTS = """
import httpx, pytest

pytestmark = pytest.mark.ssetape("tape.jsonl")


def ask(ssetape, upstream, content):
    body = dict(model="sim-chat", stream=True, messages=[dict(role="user", content=content)])
    r = httpx.post(ssetape.base_url(upstream) + "/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == 200, r.text
    assert "[DONE]" in r.text


def test_chat(ssetape):
    for upstream, content in {asks!r}:
        ask(ssetape, upstream, content)
"""


@pytest.fixture
def args(confdir: Path) -> list[str]:
    return ["--ssetape-confdir", str(confdir), "-p", "no:cacheprovider", "-p", "no:randomly"]


def dead_upstream() -> str:
    """An http URL on 127.0.0.1 where nothing listens (matching compares hosts, not ports)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def recordings(cassette: Path) -> list[tuple[str, str]]:
    """(prompt, state) of each recording in the cassette, in order."""
    out = []
    for line in cassette.read_text().splitlines():
        obj = orjson.loads(line)
        if obj.get("kind") == "exchange":
            body = orjson.loads(obj["request_body"]) if obj.get("request_body") else {}
            out.append((body["messages"][0]["content"], obj["state"]))
    return out


def test_new_episodes_records_what_the_cassette_lacks(
    pytester: pytest.Pytester, args: list[str]
) -> None:
    cassette = pytester.path / "tape.jsonl"
    with Simulator(speed=SIM_SPEED).serve_in_thread() as sim:
        pytester.makepyfile(test_llm=TESTS.format(asks=[(sim.url, "hi")]))
        pytester.runpytest("--ssetape-record-mode=once", *args).assert_outcomes(passed=1)
        assert recordings(cassette) == [("hi", "completed")]
        pytester.makepyfile(test_llm=TESTS.format(asks=[(sim.url, "hi"), (sim.url, "bye")]))
        result = pytester.runpytest("--ssetape-record-mode=new_episodes", *args)
        result.assert_outcomes(passed=1)
    assert recordings(cassette) == [("hi", "completed"), ("bye", "completed")]
    pytester.runpytest(*args).assert_outcomes(passed=1)  # offline, record mode none


def test_a_failed_recording_is_recorded_again(pytester: pytest.Pytester, args: list[str]) -> None:
    """The upstream was down while recording: `once` re-records a cassette of nothing but
    failures, says so, and the good recording is what replays offline."""
    cassette, down = pytester.path / "tape.jsonl", dead_upstream()
    pytester.makepyfile(test_llm=TESTS.format(asks=[(down, "hi")]))
    pytester.runpytest("--ssetape-record-mode=once", *args).assert_outcomes(failed=1)
    assert recordings(cassette) == [("hi", "failed")]
    with Simulator(speed=SIM_SPEED).serve_in_thread() as sim:
        pytester.makepyfile(test_llm=TESTS.format(asks=[(sim.url, "hi")]))
        result = pytester.runpytest("--ssetape-record-mode=once", *args)
        result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*tape.jsonl holds only failed recordings*re-recording it*"])
    assert recordings(cassette) == [("hi", "completed")]
    pytester.runpytest(*args).assert_outcomes(passed=1)


def test_a_failed_recording_among_good_ones_names_the_fix(
    pytester: pytest.Pytester, args: list[str]
) -> None:
    """`once` replays a cassette with a good recording, so the failed one is a miss that says
    why and how to fix it; new_episodes records it; the hint's `ssetape list` reads the
    cassette itself."""
    cassette, down = pytester.path / "tape.jsonl", dead_upstream()
    with Simulator(speed=SIM_SPEED).serve_in_thread() as sim:
        pytester.makepyfile(test_llm=TESTS.format(asks=[(sim.url, "hi"), (down, "bye")]))
        pytester.runpytest("--ssetape-record-mode=once", *args).assert_outcomes(failed=1)
        assert recordings(cassette) == [("hi", "completed"), ("bye", "failed")]
        pytester.makepyfile(test_llm=TESTS.format(asks=[(sim.url, "hi"), (sim.url, "bye")]))
        result = pytester.runpytest("--ssetape-record-mode=once", *args)
        result.assert_outcomes(failed=1)
        text = result.stdout.str()
        line = next(
            n for n, raw in enumerate(cassette.read_text().splitlines(), 1) if '"failed"' in raw
        )
        assert f"its recording (cassette line {line}) failed (" in text, text
        assert "--ssetape-record-mode=new_episodes" in text
        assert f"ssetape list --db {cassette}" in text
        listed = subprocess.run(
            [SSETAPE, "list", "--db", str(cassette)], capture_output=True, text=True, timeout=60
        )
        assert listed.returncode == 0, listed.stderr
        rows = listed.stdout.splitlines()[1:]
        assert len(rows) == 2 and "no_resp" in rows[0] and "completed" in rows[1], rows
        result = pytester.runpytest("--ssetape-record-mode=new_episodes", *args)
        result.assert_outcomes(passed=1)
    assert ("bye", "completed") in recordings(cassette)
    pytester.runpytest(*args).assert_outcomes(passed=1)
