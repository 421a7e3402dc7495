"""The pytest plugin's faults: a cassette recorded from the simulator, replayed with a real
outage chosen by the marker (``faults=[...]``) or by the test (``ssetape.fault(...)``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ssetape.simulator.simulator import Simulator
from tests.conftest import SIM_SPEED

pytest_plugins = ["pytester"]

HEAD = """
import time, anthropic, httpx, openai, pytest

pytestmark = pytest.mark.ssetape("cassettes/shared.jsonl")  # one recording proxy, not four
UPSTREAM = {upstream!r}
CHAT = dict(model="gpt-4o", stream=True, messages=[{{"role": "user", "content": "hi"}}])
MSG = dict(model="claude-sonnet-4", max_tokens=50, messages=[{{"role": "user", "content": "hi"}}])


def chat(ssetape, retries=0):
    return openai.OpenAI(base_url=ssetape.base_url(UPSTREAM + "/v1"), api_key="k",
                         max_retries=retries)
"""

RECORD = HEAD + """
def test_record(ssetape):
    list(chat(ssetape).chat.completions.create(**CHAT))
    c = anthropic.Anthropic(base_url=ssetape.base_url(UPSTREAM), api_key="k", max_retries=0)
    with c.messages.stream(**MSG) as s:
        s.get_final_message()
"""  # fmt: skip

REPLAY = HEAD + """
@pytest.mark.ssetape(faults=["cut:event=4"])
def test_cut(ssetape):
    url = ssetape.base_url(UPSTREAM + "/v1") + "/chat/completions"
    got = b""
    with pytest.raises(httpx.RemoteProtocolError):
        with httpx.stream("POST", url, json=CHAT) as r:
            for data in r.iter_raw():
                got += data
    assert got.count(b"\\n\\n") == 4  # four recorded events, then the drop


def test_error(ssetape):
    ssetape.fault("error", after_event=5)
    with pytest.raises(openai.APIError, match="The server had an error"):
        list(chat(ssetape).chat.completions.create(**CHAT))


@pytest.mark.ssetape(faults="error:event=3")
def test_anthropic(ssetape):
    c = anthropic.Anthropic(base_url=ssetape.base_url(UPSTREAM), api_key="k", max_retries=0)
    with pytest.raises(anthropic.APIStatusError, match="Overloaded"):
        with c.messages.stream(**MSG) as s:
            s.get_final_message()


def test_retry(ssetape):
    ssetape.fault("status", status=429, retry_after=1)
    t0 = time.monotonic()
    chunks = list(chat(ssetape, retries=1).chat.completions.create(**CHAT))
    assert time.monotonic() - t0 >= 0.9 and chunks


@pytest.mark.ssetape(faults=["cut:event=1,ms=5"])
def test_bad_spec(ssetape):
    pass
"""  # fmt: skip


@pytest.mark.timeout(400)  # recording starts mitmproxy: slow on a loaded machine
def test_faults_from_the_marker_and_the_fixture(pytester: pytest.Pytester, confdir: Path) -> None:
    args = ["-p", "no:cacheprovider", "--ssetape-confdir", str(confdir)]
    with Simulator(speed=SIM_SPEED).serve_in_thread() as sim:
        upstream = sim.url
        pytester.makepyfile(test_faults=RECORD.format(upstream=upstream))
        recorded = pytester.runpytest_subprocess("--ssetape-record-mode=once", *args)
        recorded.assert_outcomes(passed=1)
    pytester.makepyfile(test_faults=REPLAY.format(upstream=upstream))
    replayed = pytester.runpytest_subprocess(*args)  # offline: the simulator is gone
    replayed.assert_outcomes(passed=4, errors=1)  # a bad spec: one line, at setup
    replayed.stdout.fnmatch_lines(["*ssetape: fault 'cut:event=1,ms=5': give either event=N*"])
