"""Analyzer: every rule of the seed contract (seeds 000 and 001), checked against the simulator
where it produces the sequence and against hand-written streams where it does not."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ssetape.analysis.analyzer import ERROR_OUTCOMES, MAX_FINDINGS, Analysis, Analyzer, Finding
from ssetape.analysis.rules_openai import NEVER_ARRIVES
from ssetape.simulator import scenario as scenarios
from ssetape.simulator.anthropic_streams import OVERLOADED
from ssetape.simulator.openai_streams import REFUSAL
from ssetape.simulator.scenario import (
    Plan,
    answer_tokens,
    parse_request,
    pieces,
    plan,
    tool_arguments,
)
from ssetape.sse import SseParser

CHAT = "/v1/chat/completions"
RESPONSES = "/v1/responses"
MESSAGES = "/v1/messages"
IMAGES = "/v1/images/generations"
PROMPT = "Tell me about tapes"
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
}
ARGS = orjson.dumps(tool_arguments(WEATHER, PROMPT)).decode()
_API = {CHAT: "chat", RESPONSES: "responses", MESSAGES: "messages", IMAGES: "images"}


@dataclass(frozen=True)
class Stored:
    """One event as the recorder stores it."""

    seq: int
    offset_us: int
    event: str | None
    data: str | None

    @property
    def json(self) -> Any:
        assert self.data is not None
        return orjson.loads(self.data)


@dataclass
class Sim:
    plan: Plan
    events: list[Stored]
    request: bytes
    sc: scenarios.Scenario
    path: str

    def analyze(
        self,
        *,
        upto: int | None = None,
        state: str = "completed",
        path: str | None = None,
    ) -> Analysis:
        """Feed the first ``upto`` stored events (all by default) and finish."""
        an = Analyzer(method="POST", path=path or self.path, request_body=self.request)
        for e in self.events[:upto]:
            an.feed(e.seq, e.offset_us, e.event, e.data)
        content_type = dict(self.plan.headers)["content-type"]
        body = None if self.plan.stream else b"".join(c.data for c in self.plan.chunks)
        return an.finish(
            status=self.plan.status,
            state=state,
            response_body=body,
            response_content_type=content_type,
        )


def simulate(path: str, **request: Any) -> Sim:
    """Run the simulator: parse its chunks as the recorder does, each event stamped with the
    time of the chunk that completed it."""
    request.setdefault("stream", True)
    if path == RESPONSES:
        request.setdefault("input", PROMPT)
    elif path == IMAGES:
        request.setdefault("prompt", PROMPT)
    else:
        request.setdefault("messages", [{"role": "user", "content": PROMPT}])
    raw = orjson.dumps(request)
    p = plan("POST", path, {}, raw)
    parser = SseParser()
    events: list[Stored] = []
    if p.stream:
        for chunk in p.chunks:
            for ev in parser.feed(chunk.data):
                events.append(Stored(len(events), round(chunk.at * 1e6), ev.event, ev.data))
        last = round(p.chunks[-1].at * 1e6) if p.chunks else 0
        for ev in parser.close():
            events.append(Stored(len(events), last, ev.event, ev.data))
    sc = parse_request(_API[path], {}, raw)  # type: ignore[arg-type]
    return Sim(p, events, raw, sc, path)


def run(
    path: str,
    events: list[tuple[str | None, Any]],
    *,
    request: dict[str, Any] | None = None,
    state: str = "completed",
    status: int | None = 200,
    offsets: list[int] | None = None,
) -> Analysis:
    """Analyse hand-written events: data given as str is sent as is, anything else as JSON."""
    an = Analyzer(method="POST", path=path, request_body=orjson.dumps(request or {}))
    for seq, (event, data) in enumerate(events):
        text = data if data is None or isinstance(data, str) else orjson.dumps(data).decode()
        an.feed(seq, offsets[seq] if offsets else 1000 * seq, event, text)
    return an.finish(status=status, state=state, response_content_type="text/event-stream")


def codes(a: Analysis) -> list[str]:
    return [f.code for f in a.findings]


def content_offsets(sim: Sim, is_content: Any) -> list[int]:
    return [e.offset_us for e in sim.events if e.data is not None and is_content(e)]


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
    # The error chunk is the terminal: no [DONE] is missing, but the usage asked for is.
    assert codes(a) == ["usage_missing"]


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
    a = run(
        RESPONSES,
        [
            ("response.created", {"response": {"model": "m"}}),
            (name, {"type": name}),
            ("response.completed", {"response": {}}),
        ],
    )
    assert a.outcome == "completed"
    assert a.findings == [Finding("never_arrives", 1, a.findings[0].detail)]
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


# Messages: seed 000 ------------------------------------------------------------------------


def claude(**extra: Any) -> Sim:
    return simulate(MESSAGES, **{"model": "claude-sonnet-4", "max_tokens": 12, **extra})


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
    for reason in ("stop_sequence", "pause_turn", "end_turn", "tool_use"):
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
    a = run(
        MESSAGES,
        [
            ("message_start", {"message": {}}),
            ("content_block_delta", {"index": 0, "delta": {"type": "citations_delta"}}),
            ("message_stop", {}),
        ],
    )
    assert a.outcome == "completed"
    assert [(f.code, f.event_seq) for f in a.findings] == [("unknown_event", 1)]


# Images ------------------------------------------------------------------------------------


def test_images_partial_images_completed_and_usage() -> None:
    sim = simulate(IMAGES, model="gpt-image-1", partial_images=2)
    a = sim.analyze()
    assert a.api == "images"
    assert a.model == "gpt-image-1"  # events carry no model: from the request
    assert (a.outcome, a.reason) == ("completed", "completed")
    assert (a.input_tokens, a.output_tokens) == (sim.sc.prompt_tokens, 272)
    assert a.total_tokens == sim.sc.prompt_tokens + 272
    partial = [e for e in sim.events if e.event == "image_generation.partial_image"]
    assert len(partial) == 2
    assert a.ttft_us == partial[0].offset_us
    assert a.gap_max_us == partial[1].offset_us - partial[0].offset_us
    assert a.findings == []


def test_images_done_after_error_is_tolerated() -> None:
    error = ("error", {"type": "error", "error": {"message": "no"}})
    a = run(IMAGES, [error, (None, "[DONE]")])
    assert (a.outcome, a.reason, a.findings) == ("error", "no", [])
    b = run(IMAGES, [error, (None, "[DONE]"), ("image_generation.partial_image", {})])
    assert [(f.code, f.event_seq) for f in b.findings] == [("event_after_terminal", 2)]


def test_images_without_done_and_done_without_completed() -> None:
    completed = ("image_generation.completed", {"usage": {"input_tokens": 1}})
    a = run(IMAGES, [completed])
    assert a.outcome == "completed"
    assert codes(a) == ["no_terminal_event"]
    b = run(IMAGES, [("image_generation.partial_image", {}), (None, "[DONE]")])
    assert (b.outcome, b.reason) == ("cut", "no terminal event")
    assert codes(b) == ["no_terminal_event"]


@pytest.mark.parametrize("model", ["gpt-image-1-sim-error", "gpt-image-1-sim-error-early"])
def test_images_error(model: str) -> None:
    sim = simulate(IMAGES, model=model, partial_images=2)
    a = sim.analyze()
    assert (a.outcome, a.reason) == ("error", "server_error")
    assert a.findings == []


# Contract findings -------------------------------------------------------------------------


def test_event_after_terminal() -> None:
    sim = simulate(RESPONSES, model="gpt-4o")
    late = Stored(len(sim.events), 9_999_999, "response.output_text.delta", '{"delta":"x"}')
    sim.events.append(late)
    a = sim.analyze()
    assert a.outcome == "completed"
    assert a.output_text == sim.sc.text  # nothing after the terminal is taken in
    assert [(f.code, f.event_seq) for f in a.findings] == [("event_after_terminal", late.seq)]
    msg = claude()
    msg.events.append(Stored(len(msg.events), 9_999_999, "ping", '{"type":"ping"}'))
    assert codes(msg.analyze()) == ["event_after_terminal"]
    chat = simulate(CHAT, model="gpt-4o")
    chat.events.append(Stored(len(chat.events), 9_999_999, None, "[DONE]"))
    chat.events.append(Stored(len(chat.events), 9_999_999, None, None))  # a comment
    assert codes(chat.analyze()) == ["event_after_terminal"]  # the comment is not an event


@pytest.mark.parametrize("path", [CHAT, RESPONSES, MESSAGES])
def test_missing_terminal_event(path: str) -> None:
    sim = simulate(path, model="m")
    terminal = {CHAT: 1, RESPONSES: 1, MESSAGES: 1}[path]
    for state, reason in (("completed", "no terminal event"), ("truncated", "truncated")):
        # Chat keeps its finish_reason: only [DONE] is cut off.
        a = sim.analyze(upto=len(sim.events) - terminal, state=state)
        assert codes(a) == ["no_terminal_event"]
        assert a.findings[0].event_seq is None
        if path == CHAT:
            assert (a.outcome, a.reason) == ("completed", "stop")
        else:
            assert (a.outcome, a.reason) == ("cut", reason)


def test_sim_cut_stream() -> None:
    sim = simulate(RESPONSES, model="gpt-4o-sim-cut")
    assert sim.plan.cut
    a = sim.analyze()
    assert (a.outcome, a.reason) == ("cut", "no terminal event")
    assert a.outcome in ERROR_OUTCOMES
    # The half event the connection closed in is broken JSON.
    assert codes(a) == ["invalid_json", "no_terminal_event"]
    assert a.findings[0].event_seq == sim.events[-1].seq
    assert a.output_text == "".join(sim.sc.tokens[:6])


def test_broken_json() -> None:
    a = run(
        CHAT,
        [
            (None, {"choices": [{"delta": {"content": "a"}}]}),
            (None, '{"choices": [{"delta": {"content": "b"'),
            (None, "[1, 2]"),
            (None, {"choices": [{"delta": {"content": "c"}, "finish_reason": "stop"}]}),
            (None, "[DONE]"),
        ],
    )
    assert (a.outcome, a.output_text) == ("completed", "ac")
    assert [(f.code, f.event_seq) for f in a.findings] == [("invalid_json", 1), ("invalid_json", 2)]
    # On typed APIs the event name still counts when its data is broken.
    r = run(RESPONSES, [("response.output_text.delta", "{"), ("response.completed", "nope")])
    assert (r.outcome, r.reason) == ("completed", "completed")
    assert codes(r) == ["invalid_json", "invalid_json"]
    m = run(MESSAGES, [("message_start", {"message": {}}), ("message_stop", "[DONE]")])
    assert (m.outcome, codes(m)) == ("completed", ["invalid_json"])


def test_unknown_event_is_informational() -> None:
    a = run(
        RESPONSES,
        [
            ("response.created", {"response": {}}),
            ("response.web_search_call.searching", {}),
            ("response.output_text.delta", {"delta": "Hi"}),
            ("response.web_search_call.searching", {}),
            ("response.completed", {"response": {}}),
        ],
    )
    assert (a.outcome, a.output_text) == ("completed", "Hi")
    assert [(f.code, f.event_seq) for f in a.findings] == [("unknown_event", 1)]  # once per name
    m = run(MESSAGES, [("message_start", {}), ("surprise", {}), ("message_stop", {})])
    assert (m.outcome, codes(m)) == ("completed", ["unknown_event"])
    nameless = run(MESSAGES, [("message_start", {}), (None, {"no": "type"}), ("message_stop", {})])
    assert [(f.code, f.event_seq) for f in nameless.findings] == [("unknown_event", 1)]
    c = run(CHAT, [("custom", {"choices": [{"delta": {"content": "x"}}]}), (None, "[DONE]")])
    assert (c.output_text, codes(c)) == ("x", ["unknown_event"])


def test_findings_are_bounded() -> None:
    an = Analyzer(method="POST", path=CHAT, request_body=None)
    for seq in range(10_000):
        an.feed(seq, seq, None, "{broken")
    a = an.finish(status=200, state="completed")
    assert len(a.findings) == MAX_FINDINGS + 2
    assert codes(a)[-2:] == ["findings_truncated", "no_terminal_event"]
    assert f"{10_000 - MAX_FINDINGS} more" in a.findings[-2].detail


# Transport outcomes ------------------------------------------------------------------------


def test_aborted_before_and_after_the_terminal() -> None:
    sim = claude()
    before = sim.analyze(upto=10, state="aborted")
    assert (before.outcome, before.reason) == ("aborted", None)
    assert before.outcome not in ERROR_OUTCOMES  # the client left: not the upstream's fault
    assert before.findings == []  # no no_terminal_event: the stream was not allowed to end
    deltas = [e.json["delta"] for e in sim.events[:10] if e.event == "content_block_delta"]
    assert deltas and before.output_text == "".join(d["text"] for d in deltas)
    assert (before.input_tokens, before.output_tokens) == (sim.sc.prompt_tokens, None)
    after = sim.analyze(state="aborted")
    assert (after.outcome, after.reason) == ("completed", "end_turn")
    assert after.findings == []


def test_truncated_interrupted_recording_and_failed() -> None:
    sim = simulate(CHAT, model="gpt-4o")
    half = len(sim.events) // 2
    assert sim.analyze(upto=half, state="truncated").outcome == "cut"
    interrupted = sim.analyze(upto=half, state="interrupted")
    assert (interrupted.outcome, interrupted.findings) == ("interrupted", [])
    assert sim.analyze(state="interrupted").outcome == "completed"
    live = sim.analyze(upto=half, state="recording")
    assert (live.outcome, live.findings) == ("recording", [])
    an = Analyzer(method="POST", path=CHAT, request_body=sim.request)
    failed = an.finish(status=None, state="failed")
    assert (failed.api, failed.model, failed.outcome) == (
        "chat_completions",
        "gpt-4o",
        "no_response",
    )
    assert failed.findings == [] and failed.outcome in ERROR_OUTCOMES


def test_finish_is_repeatable_while_recording() -> None:
    sim = simulate(CHAT, model="gpt-4o")
    an = Analyzer(method="POST", path=CHAT, request_body=sim.request)
    for e in sim.events[:5]:
        an.feed(e.seq, e.offset_us, e.event, e.data)
    assert an.finish(status=200, state="recording").outcome == "recording"
    for e in sim.events[5:]:
        an.feed(e.seq, e.offset_us, e.event, e.data)
    assert an.finish(status=200, state="completed") == sim.analyze()
    assert an.finish(status=200, state="completed") == sim.analyze()


@pytest.mark.parametrize(
    ("path", "model", "status", "reason"),
    [
        (CHAT, "gpt-4o-sim-429", 429, "rate_limit_exceeded"),
        (RESPONSES, "gpt-4o-sim-500", 500, "server_error"),
        (MESSAGES, "claude-sim-529", 529, "overloaded_error"),
        (IMAGES, "gpt-image-1-sim-400", 400, "invalid_request_error"),
    ],
)
def test_http_error_with_json_body(path: str, model: str, status: int, reason: str) -> None:
    sim = simulate(path, model=model, max_tokens=10)
    assert sim.plan.status == status and not sim.plan.stream
    a = sim.analyze()
    assert (a.outcome, a.reason) == ("http_error", reason)
    assert a.model == model
    assert a.findings == []


def test_http_error_precedence_and_plain_body() -> None:
    an = Analyzer(method="POST", path=MESSAGES, request_body=b"not json")
    an.feed(0, 0, "message_start", '{"message": {}}')
    an.feed(1, 1, "message_stop", "{}")
    a = an.finish(status=502, state="completed", response_body=b"<html>Bad gateway</html>")
    assert (a.outcome, a.reason, a.model) == ("http_error", "502", None)
    assert a.findings == []


def test_unknown_api() -> None:
    an = Analyzer(method="GET", path="/v1/models", request_body=None)
    an.feed(0, 0, None, "hello")
    a = an.finish(status=200, state="completed", response_body=b'{"data": 1}')
    assert (a.api, a.outcome, a.reason, a.findings) == ("unknown", "completed", None, [])
    assert Analyzer(method="GET", path="/x", request_body=None).finish(
        status=200, state="aborted"
    ).outcome == ("aborted")


@pytest.mark.parametrize("path", [CHAT, RESPONSES, MESSAGES, IMAGES])
def test_api_detected_from_events_behind_an_unknown_path(path: str) -> None:
    sim = simulate(path, model="m", partial_images=1)
    a = sim.analyze(path="/gateway/route-7")
    direct = sim.analyze()
    assert (a.api, a.outcome, a.output_text) == (direct.api, direct.outcome, direct.output_text)


def test_api_detected_from_gateway_paths() -> None:
    for path, api in [
        ("/api/v1/chat/completions", "chat_completions"),
        ("/openai/v1/responses?x=1", "responses"),
        ("/anthropic/v1/messages/", "messages"),
        ("/v1/images/edits", "images"),
        ("/v1/images", "images"),
        ("/v1/messages/count_tokens", "unknown"),
    ]:
        an = Analyzer(method="POST", path=path, request_body=None)
        assert an.finish(status=None, state="failed").api == api, path


# Non-streamed JSON bodies ------------------------------------------------------------------


def test_non_streamed_chat() -> None:
    sim = simulate(CHAT, model="gpt-4o", stream=False)
    a = sim.analyze()
    assert (a.api, a.outcome, a.reason) == ("chat_completions", "completed", "stop")
    assert a.output_text == sim.sc.text
    assert (a.input_tokens, a.output_tokens) == (sim.sc.prompt_tokens, 12)
    assert (a.ttft_us, a.gap_median_us, a.tokens_per_s) == (None, None, None)
    assert a.findings == []
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]
    t = simulate(CHAT, model="gpt-4o", stream=False, tools=tools)
    call = {"id": t.sc.ident("call_"), "name": "get_weather", "arguments": ARGS}
    assert t.analyze().tool_calls == [call]
    r = simulate(CHAT, model="gpt-4o-sim-refusal", stream=False).analyze()
    assert (r.outcome, r.refusal_text) == ("refused", REFUSAL)


def test_non_streamed_responses() -> None:
    sim = simulate(RESPONSES, model="gpt-4o-sim-reasoning", stream=False)
    a = sim.analyze()
    assert (a.api, a.outcome, a.reason) == ("responses", "completed", "completed")
    assert a.output_text == sim.sc.text
    assert a.reasoning_text == "".join(answer_tokens("reasoning: " + PROMPT, 8))
    assert a.output_tokens == 20
    failed = simulate(RESPONSES, model="gpt-4o-sim-failed", stream=False).analyze()
    assert (failed.outcome, failed.reason) == ("error", "server_error")
    short = simulate(RESPONSES, model="gpt-4o", stream=False, max_output_tokens=4).analyze()
    assert (short.outcome, short.reason) == ("incomplete", "max_output_tokens")


def test_non_streamed_messages_and_images() -> None:
    tools = [{"name": "get_weather", "input_schema": WEATHER}]
    sim = claude(stream=False, tools=tools)
    a = sim.analyze()
    assert (a.api, a.outcome, a.reason) == ("messages", "completed", "tool_use")
    assert a.tool_calls == [
        {"id": sim.sc.ident("toolu_01"), "name": "get_weather", "arguments": ARGS}
    ]
    # Five words of text ("I'll use get_weather for that.") and the argument pieces.
    assert (a.input_tokens, a.output_tokens) == (sim.sc.prompt_tokens, 5 + len(pieces(ARGS)))
    img = simulate(IMAGES, model="gpt-image-1", stream=False).analyze()
    assert (img.api, img.outcome, img.output_tokens) == ("images", "completed", 272)


def test_streamed_body_passed_to_finish_is_not_read_twice() -> None:
    sim = simulate(CHAT, model="gpt-4o")
    an = Analyzer(method="POST", path=CHAT, request_body=sim.request)
    for e in sim.events:
        an.feed(e.seq, e.offset_us, e.event, e.data)
    raw = b"".join(c.data for c in sim.plan.chunks)
    a = an.finish(status=200, state="completed", response_body=raw)
    assert a == sim.analyze()


def test_non_streamed_bodies_detected_by_shape_and_errors_with_200() -> None:
    def body(path: str, obj: Any, status: int = 200) -> Analysis:
        an = Analyzer(method="POST", path=path, request_body=None)
        raw = obj if isinstance(obj, bytes) else orjson.dumps(obj)
        return an.finish(
            status=status,
            state="completed",
            response_body=raw,
            response_content_type="application/json",
        )

    msg = body("/x", {"type": "message", "content": [{"type": "text", "text": "hi"}]})
    assert (msg.api, msg.outcome, msg.output_text) == ("messages", "completed", "hi")
    chat = body("/x", {"choices": [{"message": {"content": "yo"}, "finish_reason": "length"}]})
    assert (chat.api, chat.outcome, chat.output_text) == ("chat_completions", "incomplete", "yo")
    err = body(CHAT, {"error": {"code": "boom"}})
    assert (err.outcome, err.reason) == ("error", "boom")
    aerr = body(MESSAGES, {"type": "error", "error": {"type": "overloaded_error"}})
    assert (aerr.outcome, aerr.reason) == ("error", "overloaded_error")
    background = body(RESPONSES, {"object": "response", "status": "in_progress", "output": []})
    assert (background.outcome, background.reason) == ("completed", "in_progress")
    img_err = body(IMAGES, {"error": {"type": "image_generation_user_error"}})
    assert (img_err.outcome, img_err.reason) == ("error", "image_generation_user_error")
    broken = body(CHAT, b'{"choices": [')
    assert (broken.outcome, broken.reason, codes(broken)) == (
        "cut",
        "invalid JSON body",
        ["invalid_json"],
    )


# Timing ------------------------------------------------------------------------------------


def test_gaps_ttft_and_tokens_per_second_from_chosen_offsets() -> None:
    def delta(text: str) -> tuple[None, dict[str, Any]]:
        return None, {"choices": [{"index": 0, "delta": {"content": text}}]}

    events: list[tuple[str | None, Any]] = [
        (None, None),  # a comment: no data
        (None, {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
        delta("a"),
        delta("b"),
        delta(""),
        delta("c"),
        delta("d"),
        delta("e"),
        (None, {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        (None, {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 10}}),
        (None, "[DONE]"),
    ]
    offsets = [0, 50, 1_000, 1_100, 1_150, 1_400, 1_450, 3_000, 3_100, 3_200, 3_300]
    a = run(CHAT, events, offsets=offsets)
    # Content at 1000, 1100, 1400, 1450, 3000 -> gaps 100, 300, 50, 1550.
    assert a.ttft_us == 1_000
    assert a.gap_median_us == (100 + 300) // 2
    assert a.gap_p95_us == 1_550
    assert a.gap_max_us == 1_550
    assert a.tokens_per_s == pytest.approx(10 / (2_000 / 1e6))
    assert (a.input_tokens, a.output_tokens, a.total_tokens) == (3, 10, 13)
    one = run(CHAT, [delta("x"), (None, "[DONE]")], offsets=[7, 8])
    assert (one.ttft_us, one.gap_median_us, one.gap_max_us, one.tokens_per_s) == (
        7,
        None,
        None,
        None,
    )


def test_p95_is_nearest_rank() -> None:
    events = [(None, {"choices": [{"delta": {"content": "x"}}]}) for _ in range(41)]
    offsets = [0]
    for i in range(40):
        offsets.append(offsets[-1] + (i + 1))  # gaps 1..40
    a = run(CHAT, [*events, (None, "[DONE]")], offsets=[*offsets, offsets[-1]])
    assert (a.gap_median_us, a.gap_p95_us, a.gap_max_us) == (20, 38, 40)


# Interface ---------------------------------------------------------------------------------


def test_to_json_and_error_outcomes() -> None:
    assert sorted(ERROR_OUTCOMES) == [
        "cut",
        "error",
        "http_error",
        "interrupted",
        "no_response",
        "unresolved",
    ]
    a = run(CHAT, [(None, "oops"), (None, {"choices": [{"delta": {"content": "x"}}]})])
    out = a.to_json()
    assert out["outcome"] == "cut"
    assert out["findings"] == [
        {"code": "invalid_json", "event_seq": 0, "detail": a.findings[0].detail},
        {"code": "no_terminal_event", "event_seq": None, "detail": a.findings[1].detail},
    ]
    assert set(out) == set(Analysis.__dataclass_fields__)
    orjson.dumps(out)


def test_model_from_response_else_request() -> None:
    chunk = {"model": "served-model", "choices": [{"delta": {"content": "x"}}]}
    a = run(CHAT, [(None, chunk), (None, "[DONE]")], request={"model": "asked"})
    assert a.model == "served-model"
    b = run(CHAT, [(None, {"choices": []}), (None, "[DONE]")], request={"model": "asked"})
    assert b.model == "asked"


def test_unknown_state_is_reported() -> None:
    a = run(CHAT, [], state="weird")
    assert a.outcome == "interrupted"
    assert codes(a) == ["analyzer_error"]


# Robustness --------------------------------------------------------------------------------

_KEYS = [
    "choices", "delta", "content", "refusal", "tool_calls", "function", "arguments", "index",
    "finish_reason", "usage", "error", "code", "type", "message", "model", "response", "item",
    "item_id", "part", "delta", "text", "thinking", "partial_json", "content_block", "stop_reason",
    "input_tokens", "output_tokens", "prompt_tokens", "incomplete_details", "reason", "output",
    "status", "id", "call_id", "name", "input", "reasoning",
]  # fmt: skip
_EVENTS = [
    "response.created", "response.output_text.delta", "response.refusal.done",
    "response.function_call_arguments.done", "response.output_item.done", "response.completed",
    "response.failed", "response.incomplete", "error", "message_start", "content_block_start",
    "content_block_delta", "message_delta", "message_stop", "image_generation.completed",
    "image_generation.partial_image", "response.queued", "message",
]  # fmt: skip
_leaf = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=4)
    | st.sampled_from([*_KEYS, *_EVENTS, "text_delta", "input_json_delta", "stop", "error"])
)
_json = st.recursive(
    _leaf,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(_KEYS), inner, max_size=5)
    ),
    max_leaves=20,
)
_data = (
    st.none()
    | st.text(max_size=20)
    | st.just("[DONE]")
    | _json.map(lambda v: orjson.dumps(v).decode())
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    path=st.sampled_from([CHAT, RESPONSES, MESSAGES, IMAGES, "/other"]),
    events=st.lists(
        st.tuples(st.none() | st.sampled_from(_EVENTS) | st.text(max_size=8), _data), max_size=12
    ),
    status=st.none() | st.integers(100, 599),
    state=st.sampled_from(
        ["recording", "completed", "aborted", "failed", "truncated", "interrupted"]
    ),
    body=st.none() | st.binary(max_size=20) | _json.map(orjson.dumps),
    request=st.none() | st.binary(max_size=10) | _json.map(orjson.dumps),
)
def test_arbitrary_input_never_raises(
    path: str,
    events: list[tuple[str | None, str | None]],
    status: int | None,
    state: str,
    body: bytes | None,
    request: bytes | None,
) -> None:
    an = Analyzer(method="POST", path=path, request_body=request)
    for seq, (event, data) in enumerate(events):
        an.feed(seq, seq * 10, event, data)
    a = an.finish(status=status, state=state, response_body=body)
    assert "analyzer_error" not in codes(a), a.findings
    orjson.dumps(a.to_json())
