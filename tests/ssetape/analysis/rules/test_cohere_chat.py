"""Cohere's v2 Chat API: ``ssetape.analysis.rules.cohere_chat``, on streams built from the
cohere-python SDK's ``V2ChatStreamResponse`` shapes."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from ssetape.analysis import apis
from ssetape.analysis.analyzer import Analyzer
from ssetape.analysis.findings import FindingCode
from tests.ssetape.analysis.streams import codes, run

PATH = "/v2/chat"
MODEL = "command-a-03-2025"
REQUEST = {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "Hi"}]}
ARGS = '{"location": "Toronto"}'


def ev(kind: str, **fields: Any) -> tuple[str, dict[str, Any]]:
    """One event as Cohere sends it: the SSE name, and the same name as the payload's type."""
    return kind, {"type": kind, **fields}


def msg(**message: Any) -> dict[str, Any]:
    return {"message": message}


START = ev(
    "message-start",
    id="c14c80c3-18eb-4519-9460-6c92edd8cfb4",
    delta=msg(role="assistant", content=[], tool_plan="", tool_calls=[], citations=[]),
)
USAGE = {
    "billed_units": {"input_tokens": 5, "output_tokens": 3},
    "tokens": {"input_tokens": 71, "output_tokens": 5},
    "cached_tokens": 0,
}


def end(finish: str | None, usage: dict[str, Any] | None = None, **delta: Any) -> Any:
    if finish is not None:
        delta["finish_reason"] = finish
    return ev("message-end", delta={**delta, "usage": usage or USAGE})


def text_stream(*pieces: str, finish: str = "COMPLETE") -> list[tuple[str | None, Any]]:
    return [
        START,
        ev("content-start", index=0, delta=msg(content={"type": "text", "text": ""})),
        *(ev("content-delta", index=0, delta=msg(content={"text": p})) for p in pieces),
        ev("content-end", index=0),
        end(finish),
    ]


def test_text_stream() -> None:
    a = run(PATH, text_stream("Hello", " there", "!"), request=REQUEST)
    assert (a.api, a.model) == ("cohere_chat", MODEL)
    assert (a.outcome, a.reason) == ("completed", "COMPLETE")
    assert a.output_text == "Hello there!"
    # The billed counts, not the ones that include Cohere's own template tokens.
    assert (a.input_tokens, a.output_tokens, a.total_tokens) == (5, 3, 8)
    assert a.cache_read_tokens == 0
    assert a.ttft_us == 2000  # the first content-delta is event 2
    assert a.findings == []


def test_tool_plan_and_tool_call() -> None:
    call = {
        "id": "get_weather_1byjy32y4hvq",
        "type": "function",
        "function": {"name": "get_weather", "arguments": ""},
    }
    pieces = ['{"loc', 'ation": "Tor', 'onto"}']
    events = [
        START,
        ev("tool-plan-delta", delta=msg(tool_plan="I will look up")),
        ev("tool-plan-delta", delta=msg(tool_plan=" the weather.")),
        ev("tool-call-start", index=0, delta=msg(tool_calls=call)),
        *(
            ev("tool-call-delta", index=0, delta=msg(tool_calls={"function": {"arguments": p}}))
            for p in pieces
        ),
        ev("tool-call-end", index=0),
        end("TOOL_CALL"),
    ]
    a = run(PATH, events, request=REQUEST)
    assert (a.outcome, a.reason) == ("completed", "TOOL_CALL")
    # The SDK documents the tool plan as a chain-of-thought reflection: reasoning.
    assert a.reasoning_text == "I will look up the weather."
    assert a.output_text == ""
    assert a.tool_calls == [{"id": call["id"], "name": "get_weather", "arguments": ARGS}]
    assert a.ttft_us == 1000  # the tool plan is the first thing the model wrote
    assert a.findings == []


def test_thinking_content_is_reasoning() -> None:
    events = [
        START,
        ev("content-start", index=0, delta=msg(content={"type": "thinking", "thinking": ""})),
        ev("content-delta", index=0, delta=msg(content={"thinking": "User says hi."})),
        ev("content-end", index=0),
        ev("content-start", index=1, delta=msg(content={"type": "text", "text": ""})),
        ev("content-delta", index=1, delta=msg(content={"text": "Hello!"})),
        ev("content-end", index=1),
        end("COMPLETE"),
    ]
    a = run(PATH, events, request=REQUEST)
    assert (a.reasoning_text, a.output_text) == ("User says hi.", "Hello!")
    assert a.ttft_us == 2000
    assert a.findings == []


@pytest.mark.parametrize(
    ("finish", "outcome"),
    [
        ("COMPLETE", "completed"),
        ("STOP_SEQUENCE", "completed"),
        ("TOOL_CALL", "completed"),
        ("MAX_TOKENS", "incomplete"),
        ("ERROR", "error"),
        ("TIMEOUT", "error"),
        ("SOMETHING_NEW", "completed"),
    ],
)
def test_finish_reasons(finish: str, outcome: str) -> None:
    a = run(PATH, text_stream("Hi", finish=finish), request=REQUEST)
    assert (a.outcome, a.reason) == (outcome, finish)
    assert a.findings == []


def test_an_error_at_the_end() -> None:
    events = [*text_stream("Par")[:3], end("ERROR", error="internal server error")]
    a = run(PATH, events, request=REQUEST)
    assert (a.outcome, a.reason, a.output_text) == ("error", "ERROR", "Par")
    assert a.findings == []
    # An error message without a finish reason still says it failed.
    b = run(PATH, [START, end(None, error="boom")], request=REQUEST)
    assert (b.outcome, b.reason) == ("error", "ERROR")


def test_a_cut_stream() -> None:
    events = text_stream("Hello", " there")[:4]  # no content-end, no message-end
    cut = run(PATH, events, request=REQUEST, state="truncated")
    assert (cut.outcome, cut.reason) == ("cut", "truncated")
    assert cut.output_text == "Hello there"
    assert codes(cut) == [FindingCode.NO_TERMINAL_EVENT]
    ended = run(PATH, events, request=REQUEST)
    assert (ended.outcome, ended.reason) == ("cut", "no terminal event")
    assert [f.detail for f in ended.findings] == ["The stream ended without message-end."]


def test_unnamed_events_and_a_done_line() -> None:
    # data-only lines: the payload's type is the event; the SDK's reader skips a [DONE].
    events: list[tuple[str | None, Any]] = [(None, p) for _, p in text_stream("Hi")]
    a = run(PATH, [*events, (None, "[DONE]")], request=REQUEST)
    assert (a.outcome, a.output_text, a.findings) == ("completed", "Hi", [])


def test_usage_counts_fall_back_to_tokens_and_take_whole_floats() -> None:
    usage = {
        "billed_units": {"input_tokens": 7.0},
        "tokens": {"input_tokens": 9, "output_tokens": 4},
    }
    a = run(PATH, [START, end("COMPLETE", usage)], request=REQUEST)
    assert (a.input_tokens, a.output_tokens) == (7, 4)
    odd = {"billed_units": {"input_tokens": 2.5, "output_tokens": "x"}}
    b = run(PATH, [START, end("COMPLETE", odd)], request=REQUEST)
    assert (b.input_tokens, b.output_tokens) == (None, None)


def test_unknown_event_and_bad_payloads_never_raise() -> None:
    events: list[tuple[str | None, Any]] = [
        START,
        ev("content-delta", index=0, delta="nonsense"),
        ev("tool-call-delta", index="x", delta={"message": {"tool_calls": []}}),
        ev("surprise-event"),
        end("COMPLETE", usage=None),
    ]
    a = run(PATH, events, request=REQUEST)
    assert a.outcome == "completed"
    assert codes(a) == [FindingCode.UNKNOWN_EVENT]


def test_the_api_is_found_by_path_event_or_body() -> None:
    assert apis.detect_api("/v2/chat") == "cohere_chat"
    assert apis.detect_api("/compat/v2/chat?x=1") == "cohere_chat"
    assert apis.detect_api("/v1/chat/completions") == "chat_completions"
    assert apis.api_of_event("message-start", {}) == "cohere_chat"
    assert apis.api_of_event(None, {"type": "message-start"}) == "cohere_chat"
    # Through a route that does not tell, the first event does.
    a = run("/gateway/llm", text_stream("Hi"), request=REQUEST)
    assert (a.api, a.outcome, a.findings) == ("cohere_chat", "completed", [])


def test_a_whole_answer() -> None:
    body = {
        "id": "5a50480a-cf52-46f0-af01-53d18539bd31",
        "finish_reason": "TOOL_CALL",
        "message": {
            "role": "assistant",
            "tool_plan": "I will check the weather.",
            "content": [{"type": "thinking", "thinking": "Hmm."}, {"type": "text", "text": "Ok"}],
            "tool_calls": [
                {
                    "id": "get_weather_0",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": ARGS},
                }
            ],
        },
        "usage": USAGE,
    }
    an = Analyzer(method="POST", path=PATH, request_body=orjson.dumps({"model": MODEL}))
    a = an.finish(
        status=200,
        state="completed",
        response_body=orjson.dumps(body),
        response_content_type="application/json",
    )
    assert (a.api, a.model, a.outcome, a.reason) == ("cohere_chat", MODEL, "completed", "TOOL_CALL")
    assert (a.output_text, a.reasoning_text) == ("Ok", "Hmm.I will check the weather.")
    assert a.tool_calls == [{"id": "get_weather_0", "name": "get_weather", "arguments": ARGS}]
    assert (a.input_tokens, a.output_tokens) == (5, 3)
    assert a.findings == []
    assert apis.api_of_body(body) == "cohere_chat"
