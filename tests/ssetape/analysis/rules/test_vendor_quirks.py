"""Vendors' departures from the APIs they speak, as real captures show them: each read as the
vendor means it, with no finding that is false for it."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from ssetape.analysis.analyzer import Analysis, Analyzer
from ssetape.analysis.profiles import profile_for
from ssetape.framing.sse import SseParser
from tests.ssetape.analysis.streams import CHAT, MESSAGES, RESPONSES, run

VERTEX = (
    "/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-flash"
    ":streamGenerateContent?alt=sse"
)
CREATED = "2025-07-01T10:00:00.000000Z"


def vertex_chunk(
    text: str, usage: dict[str, Any] | None = None, finish: int | None = None
) -> dict[str, Any]:
    """A Vertex AI chunk as its REST clients get it (enums as numbers, trafficType always)."""
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": [{"text": text}]}}
    if finish is not None:
        candidate["finishReason"] = finish
    return {
        "candidates": [candidate],
        "usageMetadata": {"trafficType": 1, **(usage or {})},
        "modelVersion": "gemini-2.5-flash",
        "createTime": CREATED,
        "responseId": "resp-1",
    }


FINAL_USAGE = {
    "promptTokenCount": 9,
    "candidatesTokenCount": 3,
    "totalTokenCount": 12,
    "promptTokensDetails": [{"modality": 1, "tokenCount": 9}],
}


# Vertex AI ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "host", ["us-central1-aiplatform.googleapis.com", "aiplatform.googleapis.com"]
)
def test_vertex_hosts_are_read_under_the_vertex_profile(host: str) -> None:
    assert profile_for(host).name == "vertex"


@pytest.mark.parametrize(
    "host", ["generativelanguage.googleapis.com", "aiplatform.googleapis.com.example.com"]
)
def test_other_google_hosts_are_not_vertex(host: str) -> None:
    assert profile_for(host).name == "compatible"


def test_a_completed_vertex_stream_with_a_numeric_finish_reason_is_completed() -> None:
    events: list[tuple[str | None, Any]] = [
        (None, vertex_chunk("Hello")),
        (None, vertex_chunk(" world", {"promptTokenCount": 8})),
        (None, vertex_chunk("!", FINAL_USAGE, finish=1)),
    ]
    a = run(VERTEX, events, profile=profile_for("europe-west4-aiplatform.googleapis.com").name)
    assert (a.profile, a.api, a.model) == ("vertex", "gemini", "gemini-2.5-flash")
    assert (a.outcome, a.reason) == ("completed", "STOP")
    assert a.output_text == "Hello world!"
    # The final prompt count (9) wins over the first (8); trafficType-only usage erases none.
    assert (a.input_tokens, a.output_tokens, a.total_tokens) == (9, 3, 12)
    assert a.ttft_us == 0
    assert a.findings == []


def test_a_usage_holding_no_count_after_the_final_one_erases_nothing() -> None:
    events: list[tuple[str | None, Any]] = [
        (None, vertex_chunk("Hi", FINAL_USAGE, finish=1)),
        (None, {"usageMetadata": {"trafficType": 1}, "modelVersion": "gemini-2.5-flash"}),
    ]
    a = run(VERTEX, events, profile="vertex")
    assert (a.outcome, a.reason, a.input_tokens, a.output_tokens) == ("completed", "STOP", 9, 3)
    assert a.findings == []


@pytest.mark.parametrize(
    ("code", "outcome", "reason"),
    [
        (0, "completed", "FINISH_REASON_UNSPECIFIED"),
        (2, "incomplete", "MAX_TOKENS"),
        (3, "refused", "SAFETY"),
        (6, "refused", "BLOCKLIST"),
        (9, "error", "MALFORMED_FUNCTION_CALL"),
        (10, "refused", "MODEL_ARMOR"),
        (11, "refused", "IMAGE_SAFETY"),
        (15, "error", "UNEXPECTED_TOOL_CALL"),
        (99, "completed", "FINISH_REASON_99"),
    ],
)
def test_vertex_finish_reason_numbers_are_its_proto_enum(
    code: int, outcome: str, reason: str
) -> None:
    a = run(VERTEX, [(None, vertex_chunk("x", FINAL_USAGE, finish=code))], profile="vertex")
    assert (a.outcome, a.reason) == (outcome, reason)
    assert a.findings == []


def test_numbers_past_the_shared_ones_are_not_guessed_outside_vertex() -> None:
    """The Gemini API's proto numbers the names after OTHER differently: elsewhere a number is
    named only where both protos agree."""
    a = run(VERTEX, [(None, vertex_chunk("x", FINAL_USAGE, finish=2))])
    assert (a.profile, a.outcome, a.reason) == ("compatible", "incomplete", "MAX_TOKENS")
    b = run(VERTEX, [(None, vertex_chunk("x", FINAL_USAGE, finish=9))])
    assert (b.outcome, b.reason) == ("completed", "FINISH_REASON_9")


@pytest.mark.parametrize(("code", "reason"), [(1, "SAFETY"), (4, "PROHIBITED_CONTENT")])
def test_a_numeric_block_reason_refuses_the_prompt(code: int, reason: str) -> None:
    blocked = {
        "promptFeedback": {"blockReason": code, "blockReasonMessage": "blocked"},
        "usageMetadata": {"promptTokenCount": 7, "totalTokenCount": 7, "trafficType": 1},
        "modelVersion": "gemini-2.5-flash",
    }
    a = run(VERTEX, [(None, blocked)], profile="vertex")
    assert (a.outcome, a.reason, a.input_tokens) == ("refused", reason, 7)
    assert a.findings == []


# Chat Completions gateways -----------------------------------------------------------------


def chunk(delta: dict[str, Any], finish: str | None = None, **top: Any) -> dict[str, Any]:
    return {
        "id": "cmpl-1",
        "object": "chat.completion.chunk",
        "created": 1750000000,
        "model": "magistral-medium-2507",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **top,
    }


def test_mistral_thinking_and_text_parts() -> None:
    usage = {"prompt_tokens": 10, "total_tokens": 16, "completion_tokens": 6}
    events: list[tuple[str | None, Any]] = [
        (None, chunk({"role": "assistant", "content": ""})),
        (
            None,
            chunk(
                {"content": [{"type": "thinking", "thinking": [{"type": "text", "text": "Let "}]}]}
            ),
        ),
        (
            None,
            chunk(
                {
                    "content": [
                        {"type": "thinking", "thinking": [{"type": "text", "text": "me see."}]}
                    ]
                }
            ),
        ),
        (None, chunk({"content": [{"type": "text", "text": "Four"}]})),
        (None, chunk({"content": "."}, "stop", usage=usage)),
        (None, "[DONE]"),
    ]
    a = run(CHAT, events, offsets=[100, 200, 300, 400, 500, 600])
    assert (a.outcome, a.reason) == ("completed", "stop")
    assert (a.reasoning_text, a.output_text) == ("Let me see.", "Four.")
    assert a.ttft_us == 200  # the first thinking token, not the first answer token
    assert (a.input_tokens, a.output_tokens) == (10, 6)
    assert a.findings == []


def test_mistral_tool_calls_without_index_or_type_are_told_apart_by_id() -> None:
    def call(call_id: str, city: str) -> dict[str, Any]:
        args = orjson.dumps({"city": city}).decode()
        return {"id": call_id, "function": {"name": "get_weather", "arguments": args}}

    events: list[tuple[str | None, Any]] = [
        (None, chunk({"role": "assistant", "content": ""})),
        (None, chunk({"tool_calls": [call("D681PevKs", "Paris")]})),
        (None, chunk({"tool_calls": [call("Xq2b9LmTz", "Lyon")]}, "tool_calls")),
        (None, "[DONE]"),
    ]
    a = run(CHAT, events)
    assert (a.outcome, a.reason) == ("completed", "tool_calls")
    assert a.tool_calls == [
        {"id": "D681PevKs", "name": "get_weather", "arguments": '{"city":"Paris"}'},
        {"id": "Xq2b9LmTz", "name": "get_weather", "arguments": '{"city":"Lyon"}'},
    ]
    assert a.ttft_us == 1000
    assert a.findings == []


def together(token: str, finish: str | None = None, **top: Any) -> dict[str, Any]:
    choice = {
        "index": 0,
        "text": token,
        "logprobs": None,
        "finish_reason": finish,
        "seed": None,
        "delta": {"token_id": 1234, "role": "assistant", "content": token, "tool_calls": None},
    }
    return {"id": "o1", "object": "chat.completion.chunk", "model": "m", "choices": [choice], **top}


def test_together_token_sent_twice_counts_once() -> None:
    usage = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
    events: list[tuple[str | None, Any]] = [
        (None, together("Hi")),
        (None, together("!", "stop", usage=usage)),
        (None, "[DONE]"),
    ]
    a = run(CHAT, events)
    assert (a.outcome, a.output_text, a.output_tokens) == ("completed", "Hi!", 2)
    assert a.findings == []


def test_snowflake_stream_without_finish_reason_completes_at_done() -> None:
    def sf(**fields: Any) -> dict[str, Any]:
        return {"id": "", "created": 0, "model": "claude-3-5-sonnet", **fields}

    usage = {"prompt_tokens": 12, "completion_tokens": 2, "total_tokens": 14}
    events: list[tuple[str | None, Any]] = [
        (None, sf(choices=[{"index": 0, "delta": {"content": "Hello"}}])),
        (None, sf(choices=[{"index": 0, "delta": {"content": " there"}}])),
        (None, sf(choices=[], usage=usage)),
        (None, "[DONE]"),
    ]
    request = {"stream": True, "stream_options": {"include_usage": True}}
    a = run(CHAT, events, request=request)
    # [DONE] is the stream's own end: nothing was cut; no finish_reason means no reason.
    assert (a.outcome, a.reason, a.output_text) == ("completed", None, "Hello there")
    assert (a.input_tokens, a.output_tokens, a.total_tokens) == (12, 2, 14)
    assert a.findings == []


def test_openai_moderation_chunk_after_the_usage_chunk() -> None:
    usage = {"prompt_tokens": 8, "completion_tokens": 1, "total_tokens": 9}
    result = {"flagged": False, "categories": {"hate": False}, "category_scores": {"hate": 0.0}}
    events: list[tuple[str | None, Any]] = [
        (None, chunk({"role": "assistant", "content": "Hi"})),
        (None, chunk({}, "stop")),
        (None, {"id": "cmpl-1", "object": "chat.completion.chunk", "choices": [], "usage": usage}),
        (
            None,
            {
                "id": "cmpl-1",
                "object": "chat.completion.chunk",
                "choices": [],
                "moderation": {"input": result, "output": result},
            },
        ),
        (None, "[DONE]"),
    ]
    a = run(CHAT, events, request={"stream_options": {"include_usage": True}})
    assert (a.outcome, a.reason, a.output_text, a.total_tokens) == ("completed", "stop", "Hi", 9)
    assert a.findings == []


def test_azure_latency_checkpoint_and_vllm_token_ids_pass_without_findings() -> None:
    usage = {
        "prompt_tokens": 4,
        "completion_tokens": 1,
        "total_tokens": 5,
        "latency_checkpoint": {"service_ttft_ms": 210.5, "engine_tbt_ms": 12.1},
    }
    events: list[tuple[str | None, Any]] = [
        (None, chunk({"role": "assistant", "content": ""}, prompt_token_ids=[1, 2, 3, 4])),
        (
            None,
            {
                **chunk({"content": "Yes"}),
                "choices": [
                    {
                        "index": 0,
                        "delta": {"content": "Yes"},
                        "token_ids": [9],
                        "finish_reason": None,
                    }
                ],
            },
        ),
        (None, chunk({}, "stop", usage=usage)),
        (None, "[DONE]"),
    ]
    a = run(CHAT, events)
    assert (a.outcome, a.output_text, a.input_tokens, a.output_tokens) == ("completed", "Yes", 4, 1)
    assert a.findings == []


# Anthropic Messages ------------------------------------------------------------------------


def message_start(model: str = "claude-opus-4-6") -> tuple[str, dict[str, Any]]:
    message: dict[str, Any] = {
        "id": "msg_1", "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "usage": {"input_tokens": 23000, "output_tokens": 1},
    }  # fmt: skip
    return "message_start", {"type": "message_start", "message": message}


def block(index: int, content_block: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    ev = {"type": "content_block_start", "index": index, "content_block": content_block}
    return "content_block_start", ev


def delta(index: int, value: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return "content_block_delta", {"type": "content_block_delta", "index": index, "delta": value}


def stop(index: int) -> tuple[str, dict[str, Any]]:
    return "content_block_stop", {"type": "content_block_stop", "index": index}


def end(stop_reason: str, usage: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": usage,
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]


ITERATIONS = [
    {"type": "compaction", "input_tokens": 180000, "output_tokens": 3500},
    {"type": "message", "input_tokens": 23000, "output_tokens": 1000},
]


def test_anthropic_compaction_block_and_usage_iterations() -> None:
    summary = {"type": "compaction_delta", "content": "<summary>So far</summary>",
               "encrypted_content": "opaque"}  # fmt: skip
    events: list[tuple[str | None, Any]] = [
        message_start(),
        block(0, {"type": "compaction", "content": None, "encrypted_content": None}),
        delta(0, summary),
        stop(0),
        block(1, {"type": "text", "text": ""}),
        delta(1, {"type": "text_delta", "text": "Done."}),
        stop(1),
        *end("end_turn", {"input_tokens": 23000, "output_tokens": 1000, "iterations": ITERATIONS}),
    ]
    a = run(MESSAGES, events)
    assert (a.outcome, a.reason, a.output_text, a.reasoning_text) == (
        "completed",
        "end_turn",
        "Done.",
        "",
    )
    # The top-level counts, as reported: iterations are not added to them.
    assert (a.input_tokens, a.output_tokens) == (23000, 1000)
    assert a.ttft_us == 2000  # the summary is the first generated content
    assert a.findings == []


def test_anthropic_pause_after_compaction_is_incomplete() -> None:
    events: list[tuple[str | None, Any]] = [
        message_start(),
        block(0, {"type": "compaction", "content": None}),
        delta(0, {"type": "compaction_delta", "content": "summary"}),
        stop(0),
        *end("compaction", {"output_tokens": 0, "iterations": ITERATIONS[:1]}),
    ]
    a = run(MESSAGES, events)
    assert (a.outcome, a.reason, a.output_tokens) == ("incomplete", "compaction", 0)
    assert a.findings == []


def test_anthropic_server_and_mcp_tool_blocks_and_an_advisor_iteration() -> None:
    advisor_input = '{"question": "Which approach?"}'
    iterations = [
        {"type": "message", "input_tokens": 500, "output_tokens": 40},
        {"type": "advisor_message", "model": "claude-opus-4-6", "input_tokens": 900,
         "output_tokens": 120},
        {"type": "message", "input_tokens": 640, "output_tokens": 30},
    ]  # fmt: skip
    events: list[tuple[str | None, Any]] = [
        message_start("claude-sonnet-4-6"),
        block(0, {"type": "server_tool_use", "id": "srvtoolu_1", "name": "advisor", "input": {}}),
        delta(0, {"type": "input_json_delta", "partial_json": advisor_input}),
        stop(0),
        block(
            1,
            {
                "type": "advisor_tool_result",
                "tool_use_id": "srvtoolu_1",
                "content": {"type": "advisor_result", "text": "Use B."},
            },
        ),
        stop(1),
        block(
            2,
            {
                "type": "mcp_tool_use",
                "id": "mcptoolu_1",
                "name": "search",
                "server_name": "docs",
                "input": {"q": "x"},
            },
        ),
        stop(2),
        block(
            3,
            {
                "type": "mcp_tool_result",
                "tool_use_id": "mcptoolu_1",
                "is_error": False,
                "content": [{"type": "text", "text": "found"}],
            },
        ),
        stop(3),
        block(4, {"type": "future_tool_result", "tool_use_id": "x", "content": []}),
        stop(4),
        block(5, {"type": "text", "text": ""}),
        delta(5, {"type": "text_delta", "text": "B it is."}),
        stop(5),
        *end("end_turn", {"input_tokens": 640, "output_tokens": 70, "iterations": iterations}),
    ]
    a = run(MESSAGES, events)
    assert (a.model, a.outcome, a.output_text) == ("claude-sonnet-4-6", "completed", "B it is.")
    assert a.tool_calls == []  # the provider ran them all; the client owes nothing
    assert (a.input_tokens, a.output_tokens) == (640, 70)
    assert a.findings == []


# Responses behind Bedrock (data: before event:) --------------------------------------------


def _responses_events() -> list[tuple[str, dict[str, Any]]]:
    response = {"id": "resp_1", "object": "response", "model": "openai.gpt-oss-120b",
                "status": "in_progress", "output": []}  # fmt: skip
    done = {**response, "status": "completed",
            "usage": {"input_tokens": 11, "output_tokens": 2, "total_tokens": 13}}  # fmt: skip
    return [
        ("response.created", {"type": "response.created", "response": response}),
        ("response.output_text.delta", {"type": "response.output_text.delta", "item_id": "m",
                                        "output_index": 0, "content_index": 0, "delta": "Hi"}),
        ("response.output_text.delta", {"type": "response.output_text.delta", "item_id": "m",
                                        "output_index": 0, "content_index": 0, "delta": "!"}),
        ("response.completed", {"type": "response.completed", "response": done}),
    ]  # fmt: skip


def _analyse_wire(wire: bytes, host: str) -> Analysis:
    parser = SseParser()
    an = Analyzer(method="POST", path=RESPONSES, request_body=b"{}", profile=profile_for(host))
    for i, ev in enumerate(parser.feed(wire) + parser.close()):
        an.feed(i, 1000 * i, ev.event, ev.data)
    return an.finish(status=200, state="completed", response_content_type="text/event-stream")


@pytest.mark.parametrize("separate", [False, True], ids=["one-block", "separate-blocks"])
@pytest.mark.parametrize(
    "host", ["bedrock-mantle.us-east-1.api.aws", "bedrock-runtime.us-west-2.amazonaws.com"]
)
def test_bedrock_responses_data_line_before_event_line(separate: bool, host: str) -> None:
    """SSE fields may come in any order within a block; written as blocks of their own, the
    data block still names its type in the payload and the lone event: line dispatches
    nothing. Either way the stream reads as sent, with no finding."""
    gap = b"\n\n" if separate else b"\n"
    wire = (
        b"".join(
            b"data: " + orjson.dumps(data) + gap + b"event: " + name.encode() + b"\n\n"
            for name, data in _responses_events()
        )
        + b"data: [DONE]\n\n"
    )
    a = _analyse_wire(wire, host)
    assert (a.profile, a.api, a.model) == ("compatible", "responses", "openai.gpt-oss-120b")
    assert (a.outcome, a.reason, a.output_text) == ("completed", "completed", "Hi!")
    assert (a.input_tokens, a.output_tokens) == (11, 2)
    assert a.findings == []
