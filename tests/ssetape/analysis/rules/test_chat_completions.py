"""The analyzer on Chat Completions streams: ``ssetape.analysis.rules.chat_completions``."""

from __future__ import annotations

import itertools
from typing import Any

import orjson
import pytest

from ssetape.analysis.analyzer import Analysis
from ssetape.analysis.profiles import profile_for
from ssetape.framing.sse import SseParser
from ssetape.simulator.openai_streams import REFUSAL
from ssetape.simulator.scenario import (
    answer_tokens,
)
from ssetape.vocabulary import ERROR_OUTCOMES
from tests.corpus import by_name
from tests.ssetape.analysis.streams import (
    ARGS,
    CHAT,
    PROMPT,
    WEATHER,
    Stored,
    codes,
    content_offsets,
    run,
    simulate,
)

# Chat Completions: seed 000 ----------------------------------------------------------------


def chat_content(e: Stored) -> bool:
    if e.data == "[DONE]":
        return False
    choices = e.json["choices"]
    return bool(choices) and bool(choices[0]["delta"].get("content"))


@pytest.mark.parametrize("include", [True, False])
def test_chat_stream_with_and_without_include_usage(include: bool) -> None:
    extra = {"stream_options": {"include_usage": True}} if include else {}
    sim = simulate(CHAT, model="gpt-4o", **extra)
    usage = sim.events[-2].json  # the chunk before [DONE], per seed 000
    assert (usage["choices"] == []) is include
    a = sim.analyze()
    assert a.api == "chat_completions"
    assert a.model == "gpt-4o"
    assert (a.outcome, a.reason) == ("completed", "stop")
    assert a.input_tokens == sim.sc.prompt_tokens
    assert a.output_tokens == 12
    assert a.total_tokens == sim.sc.prompt_tokens + 12
    assert a.output_text == sim.sc.text
    assert (a.refusal_text, a.reasoning_text, a.tool_calls) == ("", "", [])
    assert a.findings == []
    # The role-only first delta with content "" and the comments are not content.
    offsets = content_offsets(sim, chat_content)
    assert len(offsets) == 12
    assert a.ttft_us == offsets[0] >= 120_000
    gaps = sorted(b - a for a, b in itertools.pairwise(offsets))
    assert a.gap_max_us == gaps[-1]
    assert a.gap_median_us == gaps[5]  # 11 gaps
    assert a.gap_p95_us == gaps[-1]  # nearest rank of 11 gaps
    assert a.tokens_per_s == pytest.approx(12 / ((offsets[-1] - offsets[0]) / 1e6))


def test_chat_finish_reason_length_is_incomplete() -> None:
    a = simulate(CHAT, model="gpt-4o", max_tokens=5).analyze()
    assert (a.outcome, a.reason) == ("incomplete", "length")
    assert a.output_tokens == 5
    assert a.output_text == "".join(answer_tokens(PROMPT, 12)[:5])
    assert a.findings == []


def test_chat_sim_incomplete_keyword() -> None:
    a = simulate(CHAT, model="gpt-4o-sim-incomplete").analyze()
    assert (a.outcome, a.reason) == ("incomplete", "length")


def test_chat_finish_reason_content_filter_is_refused() -> None:
    a = run(
        CHAT,
        [
            (None, {"model": "m", "choices": [{"index": 0, "delta": {"content": "Sure"}}]}),
            (None, {"choices": [{"index": 0, "delta": {}, "finish_reason": "content_filter"}]}),
            (None, "[DONE]"),
        ],
    )
    assert (a.outcome, a.reason) == ("refused", "content_filter")
    assert a.output_text == "Sure"
    assert a.findings == []


def test_chat_delta_refusal_is_refused() -> None:
    sim = simulate(CHAT, model="gpt-4o-sim-refusal")
    a = sim.analyze()
    assert (a.outcome, a.reason) == ("refused", "refusal")
    assert a.refusal_text == REFUSAL
    assert a.output_text == ""
    assert a.ttft_us is not None and a.ttft_us >= 120_000  # refusal deltas are content
    assert a.findings == []


def test_chat_tool_calls() -> None:
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]
    sim = simulate(CHAT, model="gpt-4o", tools=tools)
    a = sim.analyze()
    assert (a.outcome, a.reason) == ("completed", "tool_calls")
    assert a.tool_calls == [{"id": sim.sc.ident("call_"), "name": "get_weather", "arguments": ARGS}]
    assert a.output_text == ""
    assert a.ttft_us is not None  # argument deltas are content


def test_chat_parallel_tool_calls_and_legacy_function_call() -> None:
    def call(index: int, **fields: Any) -> dict[str, Any]:
        return {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": index, **fields}]}}]}

    a = run(
        CHAT,
        [
            (None, call(0, id="c0", function={"name": "a", "arguments": ""})),
            (None, call(1, id="c1", function={"name": "b", "arguments": '{"x"'})),
            (None, call(0, function={"arguments": "{}"})),
            (None, call(1, function={"arguments": ": 1}"})),
            (None, {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
            (None, "[DONE]"),
        ],
    )
    assert a.tool_calls == [
        {"id": "c0", "name": "a", "arguments": "{}"},
        {"id": "c1", "name": "b", "arguments": '{"x": 1}'},
    ]
    legacy = run(
        CHAT,
        [
            (None, {"choices": [{"delta": {"function_call": {"name": "f", "arguments": "{"}}}]}),
            (None, {"choices": [{"delta": {"function_call": {"arguments": "}"}}}]}),
            (None, {"choices": [{"delta": {}, "finish_reason": "function_call"}]}),
            (None, "[DONE]"),
        ],
    )
    assert legacy.tool_calls == [{"id": "", "name": "f", "arguments": "{}"}]
    assert (legacy.outcome, legacy.reason) == ("completed", "function_call")


def test_chat_error_after_the_stream_started() -> None:
    sim = simulate(CHAT, model="gpt-4o-sim-error", stream_options={"include_usage": True})
    last = sim.events[-1].json
    assert last["error"]["code"] == "server_error"
    a = sim.analyze()
    assert (a.outcome, a.reason) == ("error", "server_error")
    assert a.outcome in ERROR_OUTCOMES
    assert a.output_text == "".join(sim.sc.tokens[:6])
    assert (a.input_tokens, a.output_tokens, a.total_tokens) == (None, None, None)
    # The error chunk is the terminal: no [DONE] is missing, and a failed stream owes no
    # usage (the outcome says all there is to say: no usage_missing beside it).
    assert codes(a) == []


def test_chat_error_reason_falls_back_to_type_then_message() -> None:
    def with_error(error: Any) -> Analysis:
        chunk = {"error": error, "choices": [{"delta": {}, "finish_reason": "error"}]}
        return run(CHAT, [(None, {"choices": [{"delta": {"content": "a"}}]}), (None, chunk)])

    assert with_error({"type": "overloaded", "message": "busy"}).reason == "overloaded"
    assert with_error({"message": "busy"}).reason == "busy"
    assert with_error({"code": 502, "message": "bad gateway"}).reason == "502"
    only_finish = run(CHAT, [(None, {"choices": [{"delta": {}, "finish_reason": "error"}]})])
    assert (only_finish.outcome, only_finish.reason) == ("error", "error")
    # A [DONE] after the error chunk is tolerated; anything else is after the terminal.
    err = {"error": {"code": "x"}, "choices": []}
    tail = run(CHAT, [(None, err), (None, "[DONE]"), (None, {"choices": []})])
    assert codes(tail) == ["event_after_terminal"]
    assert tail.findings[0].event_seq == 2


def test_chat_reasoning_deltas_openrouter_style() -> None:
    a = run(
        CHAT,
        [
            (None, {"choices": [{"delta": {"role": "assistant", "reasoning": "Think"}}]}),
            (None, {"choices": [{"delta": {"reasoning_content": "ing."}}]}),
            (None, {"choices": [{"delta": {"content": "Hi"}}]}),
            (None, {"choices": [{"delta": {}, "finish_reason": "stop"}]}),
            (None, "[DONE]"),
        ],
        offsets=[100, 200, 400, 500, 600],
    )
    assert a.reasoning_text == "Thinking."
    assert a.output_text == "Hi"
    assert a.ttft_us == 100


def test_chat_usage_missing() -> None:
    events: list[tuple[str | None, Any]] = [
        (None, {"choices": [{"delta": {"content": "Hi"}}]}),
        (None, {"choices": [{"delta": {}, "finish_reason": "stop"}]}),
        (None, "[DONE]"),
    ]
    asked = {"stream": True, "stream_options": {"include_usage": True}}
    a = run(CHAT, events, request=asked)
    assert codes(a) == ["usage_missing"]
    assert a.findings[0].event_seq is None
    assert (a.input_tokens, a.output_tokens, a.total_tokens) == (None, None, None)
    assert a.tokens_per_s is None
    assert codes(run(CHAT, events, request={"stream": True})) == []


def test_chat_choice_zero_only_and_no_finish_reason() -> None:
    a = run(
        CHAT,
        [
            (None, {"choices": [{"index": 1, "delta": {"content": "other"}}]}),
            (None, {"choices": [{"index": 0, "delta": {"content": "mine"}}]}),
            (None, "[DONE]"),
        ],
    )
    # [DONE] ends the stream even without a finish_reason.
    assert (a.outcome, a.reason, a.output_text) == ("completed", None, "mine")


# Groq: usage in x_groq only -----------------------------------------------------------------


def test_groq_usage_sent_only_in_x_groq_is_read_there() -> None:
    """Groq's chunks carry ``x_groq`` (groq-python ``ChatCompletionChunk.x_groq``, an ``XGroq``
    whose ``usage`` is a ``CompletionUsage``; "different fields appear in different chunks"),
    and Groq may state the usage there alone. The real Groq capture with its top-level usage
    taken out is such a stream: its x_groq.usage still holds 304 prompt and 49 completion
    tokens, 23 of them reasoning, and asking for usage finds it delivered."""
    stream = by_name("cc_groq_tool_calls_xgroq")
    events: list[tuple[str | None, Any]] = []
    parser = SseParser()
    for ev in parser.feed(stream.body) + parser.close():
        if ev.data is None or ev.data == "[DONE]":
            events.append((ev.event, ev.data))
            continue
        chunk = orjson.loads(ev.data)
        chunk.pop("usage", None)
        events.append((ev.event, chunk))
    assert any("usage" in (c.get("x_groq") or {}) for _, c in events if isinstance(c, dict))
    request = {"stream": True, "stream_options": {"include_usage": True}}
    a = run(CHAT, events, request=request, profile=profile_for(stream.host).name)
    assert (a.outcome, a.reason) == ("completed", "tool_calls")
    assert (a.input_tokens, a.output_tokens, a.total_tokens) == (304, 49, 353)
    assert a.reasoning_tokens == 23
    assert a.findings == []
