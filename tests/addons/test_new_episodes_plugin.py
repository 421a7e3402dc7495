"""The pytest plugin in record mode new_episodes: what the cassette holds is answered by the
replay server (the recording proxy is stopped meanwhile), a burst of one missing request is
recorded once, and the next identical request replays it."""

from __future__ import annotations

from pathlib import Path

import httpx  # noqa: F401

# Imported here, before pytester snapshots sys.modules (see test_pytest_plugin).
import mitmproxy.certs  # noqa: F401
import pytest

import ssetape.testing.tape_session  # noqa: F401
from ssetape.simulator.simulator import Simulator
from tests.conftest import SIM_SPEED
from tests.ssetape.testing.test_plugin_episodes import TESTS, recordings

pytest_plugins = ["pytester"]

# The test a user writes, and a look at the processes it runs under: the `ssetape replay`
# the fixture started, and the recording proxy (`ssetape record`) that one started.
EPISODES = """
import os, signal
from concurrent.futures import ThreadPoolExecutor

import httpx, pytest

# The suite's own look at /proc (this file runs in the suite's process, through pytester).
from tests.addons.test_replay_new_episodes import children

pytestmark = pytest.mark.ssetape("tape.jsonl")


def ask(base, content):
    body = dict(model="sim-chat", stream=True, messages=[dict(role="user", content=content)])
    r = httpx.post(base + "/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == 200, r.text
    return r.content


def test_chat(ssetape):
    base = ssetape.base_url({upstream!r})
    with ThreadPoolExecutor(8) as pool:  # eight identical misses at once
        burst = list(pool.map(lambda _: ask(base, "bye"), range(8)))
    assert len(set(burst)) == 1 and b"[DONE]" in burst[0]
    [replay] = children(os.getpid(), b"replay")
    [recording] = children(replay, b"record")
    os.kill(recording, signal.SIGSTOP)  # mitmproxy can answer nothing now
    try:
        assert ask(base, "bye") == burst[0]  # recorded above: a hit
        assert b"[DONE]" in ask(base, "hi")  # from the cassette
    finally:
        os.kill(recording, signal.SIGCONT)
"""


def test_new_episodes_in_the_plugin_records_a_burst_once_and_replays_it(
    pytester: pytest.Pytester, confdir: Path
) -> None:
    args = ["--ssetape-confdir", str(confdir), "-p", "no:cacheprovider", "-p", "no:randomly"]
    cassette = pytester.path / "tape.jsonl"
    with Simulator(speed=SIM_SPEED).serve_in_thread() as sim:
        pytester.makepyfile(test_llm=TESTS.format(asks=[(sim.url, "hi")]))
        pytester.runpytest("--ssetape-record-mode=once", *args).assert_outcomes(passed=1)
        assert recordings(cassette) == [("hi", "completed")]
        upstream = sim.url
        pytester.makepyfile(test_llm=EPISODES.format(upstream=upstream))
        result = pytester.runpytest("--ssetape-record-mode=new_episodes", *args)
        result.assert_outcomes(passed=1)
    # The burst asked the upstream once: one recording joined the cassette.
    assert recordings(cassette) == [("hi", "completed"), ("bye", "completed")]
    pytester.makepyfile(test_llm=TESTS.format(asks=[(upstream, "hi"), (upstream, "bye")]))
    pytester.runpytest(*args).assert_outcomes(passed=1)  # offline, record mode none
