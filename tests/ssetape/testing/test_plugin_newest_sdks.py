"""The pytest plugin with today's SDKs (openai, anthropic and google-genai, sync and async),
recorded once and replayed offline, as a team's suite uses it.

`.ci/run` also runs this module in a Python 3.11 environment that holds the newest SDKs and no
mitmproxy (they cannot install together there): ssetape installed with ``--no-deps`` plus
``python -m ssetape.testing.requirements``, recording through the ``ssetape`` of another
environment (``$SSETAPE_BIN``). ``SSETAPE_SDK_ENV=1`` says this is that environment.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
from pathlib import Path

import pytest

from ssetape.simulator.simulator import Simulator
from tests.conftest import SIM_SPEED

pytest_plugins = ["pytester"]

TESTS = """
import anthropic, openai, pytest
from google import genai
from google.genai import types

UPSTREAM = {upstream!r}


def test_openai(ssetape):
    client = openai.OpenAI(base_url=ssetape.base_url(UPSTREAM + "/v1"), api_key="k", max_retries=0)
    chunks = list(client.chat.completions.create(
        model="sim-chat", stream=True, messages=[{{"role": "user", "content": "hi"}}]))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


@pytest.mark.anyio
async def test_anthropic_async(ssetape):
    base = ssetape.base_url(UPSTREAM)
    client = anthropic.AsyncAnthropic(base_url=base, api_key="k", max_retries=0)
    async with client.messages.stream(
        model="claude-sim", max_tokens=50, messages=[{{"role": "user", "content": "hi"}}]
    ) as stream:
        message = await stream.get_final_message()
    assert message.stop_reason == "end_turn" and message.content


def test_gemini(ssetape):
    options = types.HttpOptions(base_url=ssetape.base_url(UPSTREAM))
    client = genai.Client(api_key="k", http_options=options)
    chunks = list(client.models.generate_content_stream(model="gemini-2.5-flash", contents="hi"))
    assert "".join(c.text or "" for c in chunks)
    assert str(chunks[-1].candidates[0].finish_reason).endswith("STOP")


def test_proxy_url_says_what_to_use_instead(ssetape):
    import importlib.util
    if not ssetape.replaying or importlib.util.find_spec("mitmproxy") is not None:
        pytest.skip("only a replay in an environment without mitmproxy")
    with pytest.raises(RuntimeError, match="ssetape.base_url"):
        ssetape.proxy_url
"""


def test_the_newest_sdks_record_once_then_replay_offline(
    pytester: pytest.Pytester, confdir: Path
) -> None:
    if os.environ.get("SSETAPE_SDK_ENV"):
        # The environment .ci/run built: the SDKs that need h11>=0.16, and no mitmproxy.
        assert importlib.util.find_spec("mitmproxy") is None
        assert int(importlib.metadata.version("openai").split(".")[0]) >= 3
        assert int(importlib.metadata.version("anthropic").split(".")[0]) >= 2
        assert os.environ.get("SSETAPE_BIN")
    pytest.importorskip("google.genai", reason="google-genai is part of the test extra")
    args = ["-p", "no:cacheprovider", "--ssetape-confdir", str(confdir)]
    with Simulator(speed=SIM_SPEED).serve_in_thread() as sim:
        pytester.makepyfile(test_sdks=TESTS.format(upstream=sim.url))
        recorded = pytester.runpytest_subprocess("--ssetape-record-mode=once", *args)
        recorded.assert_outcomes(passed=3, skipped=1)
    cassettes = sorted(p.name for p in (pytester.path / "cassettes" / "test_sdks").iterdir())
    assert cassettes == [
        "test_anthropic_async[asyncio].jsonl", "test_gemini.jsonl", "test_openai.jsonl",
        "test_proxy_url_says_what_to_use_instead.jsonl",
    ]  # fmt: skip
    replayed = pytester.runpytest_subprocess(*args)  # the simulator is gone: offline
    without = importlib.util.find_spec("mitmproxy") is None
    replayed.assert_outcomes(passed=3 + without, skipped=1 - without)
