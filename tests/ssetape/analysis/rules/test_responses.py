"""The analyzer on Responses streams: the rules of ``ssetape.analysis.rules.responses``."""

from __future__ import annotations

from typing import Any

import pytest

from ssetape.analysis.findings import Finding
from ssetape.analysis.rules.responses import NEVER_ARRIVES
from ssetape.simulator.openai_streams import REFUSAL
from ssetape.simulator.scenario import (
    answer_tokens,
)
from ssetape.vocabulary import ERROR_OUTCOMES
from tests.ssetape.analysis.streams import ARGS, PROMPT, RESPONSES, WEATHER, codes, run, simulate

# Responses: seeds 000 and 001 ---------------------------------------------------------------


def test_responses_completed() -> None:
    sim = simulate(RESPONSES, model="gpt-4o")
    a = sim.analyze()
    assert a.api == "responses"
    assert a.model == "gpt-4o"
    assert (a.outcome, a.reason) == ("completed", "completed")
    assert a.output_text == sim.sc.text
    assert (a.input_tokens, a.output_tokens) == (sim.sc.prompt_tokens, 12)
    assert a.total_tokens == sim.sc.prompt_tokens + 12
    assert a.findings == []
    text = [e for e in sim.events if e.event == "response.output_text.delta"]
    assert a.ttft_us == text[0].offset_us
    assert a.tokens_per_s == pytest.approx(12 / ((text[-1].offset_us - text[0].offset_us) / 1e6))


@pytest.mark.parametrize("extra", [{"max_output_tokens": 5}, {"model": "gpt-4o-sim-incomplete"}])
def test_responses_incomplete(extra: dict[str, Any]) -> None:
    a = simulate(RESPONSES, **{"model": "gpt-4o", **extra}).analyze()
    assert (a.outcome, a.reason) == ("incomplete", "max_output_tokens")
    assert a.output_tokens is not None
    assert a.findings == []


@pytest.mark.parametrize("keyword", ["failed", "error"])
def test_responses_failed(keyword: str) -> None:
    sim = simulate(RESPONSES, model=f"gpt-4o-sim-{keyword}")
    assert sim.events[-1].event == "response.failed"
    a = sim.analyze()
    assert (a.outcome, a.reason) == ("error", "server_error")
    assert a.input_tokens == sim.sc.prompt_tokens  # the failed response carries usage
    assert a.findings == []


def test_responses_failed_without_code_uses_the_message() -> None:
    failed = {"response": {"status": "failed", "error": {"message": "upstream died"}}}
    a = run(RESPONSES, [("response.created", {"response": {}}), ("response.failed", failed)])
    assert (a.outcome, a.reason) == ("error", "upstream died")


def test_responses_error_response_unresolved() -> None:
    sim = simulate(RESPONSES, model="gpt-4o-sim-unresolved")
    assert sim.events[-1].event == "error"
    a = sim.analyze()
    assert (a.outcome, a.reason) == ("unresolved", "response_unresolved")
    assert a.outcome in ERROR_OUTCOMES
    assert (a.input_tokens, a.output_tokens) == (None, None)
    assert a.findings == []
    other = run(RESPONSES, [("error", {"type": "error", "code": "rate_limit", "message": "m"})])
    assert (other.outcome, other.reason) == ("error", "rate_limit")


def test_responses_error_event_variants() -> None:
    nested = run(
        RESPONSES, [("error", {"type": "error", "error": {"code": "response_unresolved"}})]
    )
    assert (nested.outcome, nested.reason) == ("unresolved", "response_unresolved")
    bare = run(RESPONSES, [("error", {"type": "error", "message": "lost"})])
    assert (bare.outcome, bare.reason) == ("error", "lost")
    # Exactly one terminal, and nothing follows it.
    late = run(RESPONSES, [("error", {"code": "x"}), ("response.completed", {"response": {}})])
    assert (late.outcome, codes(late)) == ("error", ["event_after_terminal"])


def test_responses_refusal_with_explanation() -> None:
    sim = simulate(RESPONSES, model="gpt-4o-sim-refusal")
    a = sim.analyze()
    assert (a.outcome, a.reason) == ("refused", "refusal")
    assert a.output_text == "".join(sim.sc.tokens[:3])  # text before the refusal part
    assert a.refusal_text == REFUSAL
    assert a.findings == []


def test_responses_refusal_without_explanation() -> None:
    sim = simulate(RESPONSES, model="gpt-4o-sim-refusal-silent")
    assert "response.refusal.delta" not in {e.event for e in sim.events}
    a = sim.analyze()
    assert (a.outcome, a.reason) == ("refused", "refusal")
    assert a.refusal_text == ""
    done_only = run(
        RESPONSES,
        [("response.refusal.done", {"refusal": "No."}), ("response.completed", {"response": {}})],
    )
    assert (done_only.outcome, done_only.refusal_text) == ("refused", "No.")


def test_responses_function_call() -> None:
    tools = [{"type": "function", "name": "get_weather", "parameters": WEATHER}]
    sim = simulate(RESPONSES, model="gpt-4o", tools=tools)
    a = sim.analyze()
    assert (a.outcome, a.reason) == ("completed", "completed")
    assert a.tool_calls == [{"id": sim.sc.ident("call_"), "name": "get_weather", "arguments": ARGS}]
    args = [e for e in sim.events if e.event == "response.function_call_arguments.delta"]
    assert a.ttft_us == args[0].offset_us


def test_responses_function_call_deltas_without_done() -> None:
    item = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f"}
    a = run(
        RESPONSES,
        [
            ("response.output_item.added", {"item": {**item, "arguments": ""}}),
            ("response.function_call_arguments.delta", {"item_id": "fc_1", "delta": '{"a":'}),
            ("response.function_call_arguments.delta", {"item_id": "fc_1", "delta": "1}"}),
            ("response.completed", {"response": {}}),
        ],
    )
    assert a.tool_calls == [{"id": "call_1", "name": "f", "arguments": '{"a":1}'}]


def test_responses_reasoning() -> None:
    sim = simulate(RESPONSES, model="gpt-4o-sim-reasoning")
    a = sim.analyze()
    assert a.reasoning_text == "".join(answer_tokens("reasoning: " + PROMPT, 8))
    assert a.output_text == sim.sc.text
    assert a.output_tokens == 12 + 8
    reasoning = [e for e in sim.events if e.event == "response.reasoning_text.delta"]
    assert a.ttft_us == reasoning[0].offset_us  # reasoning is content
    assert a.findings == []


@pytest.mark.parametrize("name", sorted(NEVER_ARRIVES))
def test_events_that_never_arrive(name: str) -> None:
    events: list[tuple[str | None, Any]] = [
        ("response.created", {"response": {"model": "m"}}),
        (name, {"type": name}),
        ("response.completed", {"response": {}}),
    ]
    a = run(RESPONSES, events, profile="seed")
    assert a.outcome == "completed"
    assert a.findings == [Finding("never_arrives", 1, a.findings[0].detail)]
    # OpenAI documents and sends every one of them (background mode, citations, summaries).
    for profile in ("openai", "openrouter", "compatible"):
        assert run(RESPONSES, events, profile=profile).findings == []
    expected = {
        "response.queued": "response.created",
        "response.output_text.annotation.added": "annotations",
        "response.reasoning_summary_part.added": "response.output_item.added",
        "response.reasoning_summary_part.done": "response.output_item.done",
        "response.reasoning_summary_text.delta": "response.reasoning_text.delta",
        "response.reasoning_summary_text.done": "response.reasoning_text.done",
    }
    assert name in a.findings[0].detail
    assert expected[name] in a.findings[0].detail


def test_responses_type_from_data_when_the_event_line_is_missing() -> None:
    a = run(
        RESPONSES,
        [
            (None, {"type": "response.output_text.delta", "delta": "Hi"}),
            (None, {"type": "response.completed", "response": {}}),
        ],
    )
    assert (a.outcome, a.output_text) == ("completed", "Hi")
