"""Tests that assert on their streams: ``ssetape.exchanges()``, the ``assert_*`` checks and
``--ssetape-strict``, with the official openai and anthropic SDKs, recorded from the simulator
and replayed offline (the checks hold the same either way)."""

from __future__ import annotations

from pathlib import Path

# Imported here, before pytester snapshots sys.modules (see test_pytest_plugin).
import anthropic  # noqa: F401
import httpx  # noqa: F401
import mitmproxy.certs  # noqa: F401
import openai  # noqa: F401
import pytest

import ssetape.testing.tape_session  # noqa: F401
from ssetape.simulator.simulator import Simulator
from tests.conftest import SIM_SPEED

pytest_plugins = ["pytester"]

# The simulator at SIM_SPEED 2: first content after ~60 ms, the sim-pause pause ~750 ms.
TESTS = """
import re
import anthropic, openai, pytest
from ssetape.testing import (assert_completed, assert_no_findings, assert_no_gap_over,
    assert_stream, assert_tool_calls, assert_ttft_under)

UPSTREAM = {upstream!r}
WEATHER = dict(name="get_weather", description="The weather in a city",
               input_schema=dict(type="object", properties=dict(city=dict(type="string"))))


def chat(ssetape, model):
    client = openai.OpenAI(base_url=ssetape.base_url(UPSTREAM + "/v1"), api_key="k", max_retries=0)
    stream = client.chat.completions.create(
        model=model, stream=True, stream_options=dict(include_usage=True),
        messages=[dict(role="user", content="hi")])
    return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)


def test_chat_with_a_pause(ssetape):
    text = chat(ssetape, "sim-pause")
    (rec,) = ssetape.exchanges()
    assert (rec.number, rec.api, rec.model, rec.outcome) == (1, "chat_completions", "sim-pause",
                                                             "completed")
    assert rec.output_text == text and rec.usage.output_tokens == 12 and rec.tokens_per_s
    assert 500 < rec.gaps.max_ms < 2000 and rec.ttft_ms < rec.duration_ms
    assert_stream(rec, ttft_under=5000, no_gap_over=2000, usage=True, tool_calls=[])
    events = rec.events()
    assert len(events) == rec.event_count and events[-1].name == "[DONE]"
    assert rec.events(limit=2) == events[:2]

    with pytest.raises(AssertionError) as failed:
        assert_no_gap_over(rec, 500)
    message = str(failed.value)
    pattern = (r"exchange #1 POST /v1/chat/completions( \\(cassette line 2\\))?: gap of "
               r"([\\d.]+) ms before event #(\\d+) \\(chat.completion.chunk at ([\\d.]+) ms\\), "
               r"after event #\\d+ at [\\d.]+ ms, is over 500 ms$")
    m = re.match(pattern, message)
    assert m, message
    gap, seq, at = float(m[2]), int(m[3]), float(m[4])
    (event,) = [e for e in events if e.seq == seq]
    assert abs(gap - rec.gaps.max_ms) < 0.1 and abs(event.offset_ms - at) < 0.1

    with pytest.raises(AssertionError, match=r"TTFT of [\\d.]+ ms \\(event #\\d+ "
                       r"\\(chat.completion.chunk at [\\d.]+ ms\\)\\) is not under 1 ms"):
        assert_ttft_under(rec, 1)


def test_anthropic_tool_call(ssetape):
    client = anthropic.Anthropic(base_url=ssetape.base_url(UPSTREAM), api_key="k", max_retries=0)
    with client.messages.stream(model="claude-sim", max_tokens=50, tools=[WEATHER],
                                messages=[dict(role="user", content="Paris?")]) as stream:
        message = stream.get_final_message()
    assert message.stop_reason == "tool_use"
    (rec,) = ssetape.exchanges()
    assert (rec.api, rec.outcome, rec.reason) == ("messages", "completed", "tool_use")
    assert_stream(rec, ttft_under=5000, usage=True, tool_calls=["get_weather"])
    assert isinstance(rec.tool_calls[0].json(), dict)
    with pytest.raises(AssertionError, match=r"^exchange #1 POST /v1/messages.*: tool calls "
                       r"\\['get_weather'\\] are not the expected \\['get_time'\\]$"):
        assert_tool_calls(rec, ["get_time"])


def test_error_mid_stream(ssetape):
    with pytest.raises(openai.APIError):
        chat(ssetape, "sim-error")
    (rec,) = ssetape.exchanges()
    assert rec.outcome == "error"
    with pytest.raises(AssertionError, match=r"^exchange #1 POST /v1/chat/completions.*: "
                       r"outcome is error \\(.+\\), not completed; \\d+ events, the last "
                       r"event #\\d+ \\(.+ at [\\d.]+ ms\\)$"):
        assert_completed(rec)


def test_cut_stream(ssetape):
    with pytest.raises(Exception):  # noqa: B017 - whatever the SDK's transport raises on a cut
        chat(ssetape, "sim-cut")
    (rec,) = ssetape.exchanges()
    assert [f.code for f in rec.findings] == ["invalid_json", "no_terminal_event"]
    with pytest.raises(AssertionError, match=r"^exchange #1 POST /v1/chat/completions.*: 2 "
                       r"finding\\(s\\): invalid_json at event #\\d+ \\(data at [\\d.]+ ms\\): .+; "
                       r"no_terminal_event on the stream as a whole: .+"):
        assert_no_findings(rec)


# The first test's cassette, already there when this one runs: replayed, even in record mode.
@pytest.mark.ssetape("cassettes/test_llm/test_chat_with_a_pause.jsonl")
def test_what_a_failed_check_shows(ssetape):
    chat(ssetape, "sim-pause")
    assert_no_gap_over(ssetape.exchanges()[0], 500)
"""


@pytest.fixture
def args(confdir: Path) -> list[str]:
    return ["--ssetape-confdir", str(confdir), "-p", "no:cacheprovider", "-p", "no:randomly"]


def test_checks_on_recorded_then_replayed_streams(
    pytester: pytest.Pytester, args: list[str]
) -> None:
    with Simulator(speed=SIM_SPEED).serve_in_thread() as sim:
        pytester.makepyfile(test_llm=TESTS.format(upstream=sim.url))
        recorded = pytester.runpytest("--ssetape-record-mode=once", *args)
    recorded.assert_outcomes(passed=4, failed=1)
    for result in (recorded, pytester.runpytest(*args)):  # the simulator is gone: replayed
        result.assert_outcomes(passed=4, failed=1)
        result.stdout.re_match_lines(
            [
                r".*AssertionError: exchange #1 POST /v1/chat/completions.*: gap of [\d.]+ ms "
                r"before event #\d+ \(chat.completion.chunk at [\d.]+ ms\), after event #\d+ "
                r"at [\d.]+ ms, is over 500 ms",
            ]
        )

    # --ssetape-strict: the cut stream's finding fails the test that passed without it.
    strict = pytester.runpytest("--ssetape-strict", "-k", "cut or anthropic", *args)
    strict.assert_outcomes(passed=1, failed=1)
    strict.stdout.re_match_lines(
        [
            r".*ssetape \(--ssetape-strict\): the test's streams carry findings:",
            r"\s+exchange #1 POST /v1/chat/completions \(cassette line 2\):",
            r"\s+- invalid_json at event #\d+ \(data at [\d.]+ ms\): .+",
            r"\s+- no_terminal_event on the stream as a whole: .+",
            r"FAILED test_llm.py::test_cut_stream.*",
        ]
    )


def test_recorded_text_in_a_failed_check_is_one_printable_line() -> None:
    """A cassette's path, tool names and finding details are recorded text: a failed check
    prints them with every control character written out, never acting on the terminal."""
    from ssetape.testing.stream_checks import (
        assert_no_findings,
        assert_tool_calls,
        findings_report,
    )
    from ssetape.testing.stream_record import Gaps, StreamFinding, StreamRecord, ToolCall, Usage

    hostile = "/v1/chat\x1b[2J\nFAKE: passed"
    record = StreamRecord(
        number=1, method="POST", path=hostile, host="h", status=200, state="completed",
        api="chat_completions", model="m", outcome="completed", reason="stop",
        usage=Usage(None, None, None, None, None, None), ttfb_ms=1.0, ttft_ms=2.0,
        gaps=Gaps(None, None, None), duration_ms=3.0, tokens_per_s=None,
        findings=(StreamFinding("invalid_json", None, "bad\x07\r\nline"),),
        tool_calls=(ToolCall("get\x1b]0;x\x07", "{}"),), output_text="", event_count=0,
        cassette_line=2, _source=None,  # type: ignore[arg-type]
    )  # fmt: skip
    for check in (assert_no_findings, lambda r: assert_tool_calls(r, ["get"])):
        with pytest.raises(AssertionError) as e:
            check(record)
        message = str(e.value)
        assert "\x1b" not in message and "\n" not in message and "\x07" not in message
        assert "\\x1b" in message and message.startswith("exchange #1 POST /v1/chat\\x1b[2J\\n")
    report = findings_report([record])
    assert "\x1b" not in report and "\x07" not in report and "bad\\x07\\r\\nline" in report
