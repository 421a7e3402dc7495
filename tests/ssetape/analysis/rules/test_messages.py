"""The analyzer on Anthropic Messages streams: the rules of ``ssetape.analysis.rules.messages``."""

from __future__ import annotations

from typing import Any

import pytest

from ssetape.analysis.analyzer import Analysis
from ssetape.simulator.anthropic_streams import OVERLOADED
from ssetape.simulator.scenario import (
    answer_tokens,
)
from tests.ssetape.analysis.streams import (
    ARGS,
    MESSAGES,
    PROMPT,
    WEATHER,
    Sim,
    claude,
    run,
)

# Messages: seed 000 ------------------------------------------------------------------------


def test_messages_text() -> None:
    sim = claude()
    a = sim.analyze()
    assert a.api == "messages"
    assert a.model == "claude-sonnet-4"
    assert (a.outcome, a.reason) == ("completed", "end_turn")
    assert a.output_text == sim.sc.text
    assert (a.input_tokens, a.output_tokens) == (sim.sc.prompt_tokens, 12)
    assert a.total_tokens == sim.sc.prompt_tokens + 12
    assert a.findings == []
    text = [e for e in sim.events if e.event == "content_block_delta"]
    assert a.ttft_us == text[0].offset_us
    assert "ping" in {e.event for e in sim.events}


def test_messages_tool_use() -> None:
    sim = claude(tools=[{"name": "get_weather", "input_schema": WEATHER}])
    a = sim.analyze()
    assert (a.outcome, a.reason) == ("completed", "tool_use")
    assert a.output_text == "I'll use get_weather for that."
    assert a.tool_calls == [
        {"id": sim.sc.ident("toolu_01"), "name": "get_weather", "arguments": ARGS}
    ]
    # The empty first input_json_delta is not content; later ones are.
    json_deltas = [
        e for e in sim.events if e.event == "content_block_delta" and "input_json" in (e.data or "")
    ]
    assert json_deltas[0].json["delta"]["partial_json"] == ""


def test_messages_thinking_and_signature() -> None:
    sim = claude(thinking={"type": "enabled", "budget_tokens": 1024})
    a = sim.analyze()
    assert a.reasoning_text == "".join(answer_tokens("thinking: " + PROMPT, 8))
    assert a.output_text == sim.sc.text
    assert a.output_tokens == 8 + 12
    deltas = [e for e in sim.events if e.event == "content_block_delta"]
    signature = next(e for e in deltas if e.json["delta"]["type"] == "signature_delta")
    assert a.ttft_us == deltas[0].offset_us
    # signature_delta is not content: dropping it from a copy changes no offset statistics.
    without = [e for e in sim.events if e is not signature]
    copy = Sim(sim.plan, without, sim.request, sim.sc, sim.path)
    b = copy.analyze()
    assert (b.ttft_us, b.gap_median_us, b.gap_p95_us, b.gap_max_us) == (
        a.ttft_us,
        a.gap_median_us,
        a.gap_p95_us,
        a.gap_max_us,
    )


def test_messages_max_tokens() -> None:
    a = claude(max_tokens=5).analyze()
    assert (a.outcome, a.reason) == ("incomplete", "max_tokens")
    assert a.output_tokens == 5


def test_messages_context_window_and_other_stop_reasons() -> None:
    def stop(reason: str) -> Analysis:
        return run(
            MESSAGES,
            [
                ("message_start", {"message": {"usage": {"input_tokens": 3}}}),
                ("message_delta", {"delta": {"stop_reason": reason}, "usage": {}}),
                ("message_stop", {}),
            ],
        )

    assert stop("model_context_window_exceeded").outcome == "incomplete"
    # A paused turn is resumed by sending it back: the answer is not whole yet.
    assert (stop("pause_turn").outcome, stop("pause_turn").reason) == ("incomplete", "pause_turn")
    for reason in ("stop_sequence", "end_turn", "tool_use"):
        assert (stop(reason).outcome, stop(reason).reason) == ("completed", reason)


def test_messages_refusal() -> None:
    sim = claude(model="claude-sim-refusal")
    a = sim.analyze()
    assert (a.outcome, a.reason) == ("refused", "refusal")
    assert a.output_text == "".join(sim.sc.tokens[:3])


def test_messages_ping_anywhere() -> None:
    ping = ("ping", {"type": "ping"})
    a = run(
        MESSAGES,
        [
            ping,
            ("message_start", {"message": {"model": "c", "usage": {"input_tokens": 7}}}),
            ping,
            ("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
            ping,
            ("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "A"}}),
            ping,
            ("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "B"}}),
            ping,
            ("content_block_stop", {"index": 0}),
            ping,
            (
                "message_delta",
                {"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}},
            ),
            ping,
            ("message_stop", {"type": "message_stop"}),
        ],
        offsets=[10 * i for i in range(14)],
    )
    assert (a.outcome, a.output_text, a.findings) == ("completed", "AB", [])
    assert (a.ttft_us, a.gap_median_us, a.gap_max_us) == (50, 20, 20)
    assert a.tokens_per_s == pytest.approx(2 / (20 / 1e6))


def test_messages_usage_rules() -> None:
    start = {
        "model": "c",
        "usage": {
            "input_tokens": 10,
            "cache_read_input_tokens": 100,
            "cache_creation_input_tokens": 50,
            "output_tokens": 1,
        },
    }
    events: list[tuple[str | None, Any]] = [
        ("message_start", {"message": start}),
        ("message_delta", {"delta": {}, "usage": {"output_tokens": 5}}),
        ("message_delta", {"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 9}}),
        ("message_stop", {}),
    ]
    a = run(MESSAGES, events)
    # Cache tokens are not added; message_start's output_tokens is a placeholder.
    assert (a.input_tokens, a.output_tokens, a.total_tokens) == (10, 9, 19)
    before_delta = run(MESSAGES, events[:1], state="aborted")
    assert (before_delta.input_tokens, before_delta.output_tokens) == (10, None)
    events[2] = ("message_delta", {"delta": {}, "usage": {"input_tokens": 12, "output_tokens": 9}})
    assert run(MESSAGES, events).input_tokens == 12  # message_delta's input count wins


def test_messages_mid_stream_error() -> None:
    sim = claude(model="claude-sim-error")
    assert sim.events[-1].event == "error"
    a = sim.analyze()
    assert (a.outcome, a.reason) == ("error", OVERLOADED["type"])
    assert a.output_text == "".join(sim.sc.tokens[:6])
    assert a.output_tokens is None
    assert a.findings == []


def test_messages_unknown_delta_type() -> None:
    def deltas(dtype: str, profile: str) -> Analysis:
        return run(
            MESSAGES,
            [
                ("message_start", {"message": {}}),
                ("content_block_delta", {"index": 0, "delta": {"type": dtype}}),
                ("message_stop", {}),
            ],
            profile=profile,
        )

    # The seed gateway names four delta types; Anthropic also sends citations_delta.
    a = deltas("citations_delta", "seed")
    assert a.outcome == "completed"
    assert [(f.code, f.event_seq) for f in a.findings] == [("unknown_event", 1)]
    assert deltas("citations_delta", "anthropic").findings == []
    assert [f.code for f in deltas("surprise_delta", "anthropic").findings] == ["unknown_event"]
