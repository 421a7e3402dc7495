"""Google's Interactions API: ``ssetape.analysis.rules.interactions``, on streams built from
the google-genai SDK's ``InteractionSSEEvent`` shapes and the streaming guide's example."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from ssetape.analysis import apis
from ssetape.analysis.analyzer import Analyzer
from ssetape.analysis.findings import FindingCode
from ssetape.views.timeline import Timeline
from tests.ssetape.analysis.streams import codes, run

PATH = "/v1beta/interactions"
MODEL = "gemini-3-flash-preview"
REQUEST = {"model": MODEL, "input": "Count to from 1 to 25.", "stream": True}
ID = "v1_ChdqZ2RyYWZ0"
USAGE = {
    "total_input_tokens": 11,
    "total_output_tokens": 70,
    "total_thought_tokens": 30,
    "total_cached_tokens": 4,
    "total_tokens": 111,
}


def ev(kind: str, **fields: Any) -> tuple[str, dict[str, Any]]:
    """One event as the API sends it: the SSE name, and the same name as event_type."""
    return kind, {**fields, "event_type": kind}


def summary(text: str) -> dict[str, Any]:
    return {"type": "thought_summary", "content": {"type": "text", "text": text}}


def created() -> tuple[str, dict[str, Any]]:
    interaction = {"id": ID, "status": "in_progress", "object": "interaction", "model": MODEL}
    return ev("interaction.created", interaction=interaction)


def completed(status: str = "completed", usage: dict[str, Any] | None = None) -> Any:
    interaction = {"id": ID, "status": status, "object": "interaction", "model": MODEL}
    return ev("interaction.completed", interaction={**interaction, "usage": usage or USAGE})


def text_steps(*pieces: str) -> list[tuple[str | None, Any]]:
    """The streaming guide's sequence: a thought step, then a model_output step."""
    return [
        created(),
        ev("interaction.status_update", interaction_id=ID, status="in_progress"),
        ev("step.start", index=0, step={"type": "thought"}),
        ev("step.delta", index=0, delta={"signature": "c2ln", "type": "thought_signature"}),
        ev("step.delta", index=0, delta=summary("Counting.")),
        ev("step.stop", index=0),
        ev("step.start", index=1, step={"type": "model_output"}),
        *(ev("step.delta", index=1, delta={"text": p, "type": "text"}) for p in pieces),
        ev("step.stop", index=1),
        completed(),
    ]  # fmt: skip


def test_text_stream_with_a_thought() -> None:
    a = run(PATH, text_steps("1, 2, 3, ", "4, 5."), request=REQUEST)
    assert (a.api, a.model) == ("interactions", MODEL)
    assert (a.outcome, a.reason) == ("completed", "completed")
    assert (a.output_text, a.reasoning_text) == ("1, 2, 3, 4, 5.", "Counting.")
    # total_output_tokens leaves the thinking out, as Gemini's candidatesTokenCount does.
    assert (a.input_tokens, a.output_tokens, a.total_tokens) == (11, 100, 111)
    assert (a.reasoning_tokens, a.cache_read_tokens) == (30, 4)
    assert a.ttft_us == 4000  # the thought summary; the signature before it is no content
    assert a.findings == []


def test_function_call_with_streamed_arguments() -> None:
    call = {"type": "function_call", "id": "call_7", "name": "get_weather", "arguments": {}}
    events = [
        created(),
        ev("step.start", index=0, step=call),
        ev("step.delta", index=0, delta={"type": "arguments_delta", "arguments": '{"city": '}),
        ev("step.delta", index=0, delta={"type": "arguments_delta", "arguments": '"Paris"}'}),
        ev("step.stop", index=0, usage={"total_input_tokens": 20, "total_output_tokens": 9}),
        completed("requires_action", usage={"total_input_tokens": 20, "total_output_tokens": 9}),
    ]
    a = run(PATH, events, request=REQUEST)
    # The client owes the call's result: the turn itself ended normally.
    assert (a.outcome, a.reason) == ("completed", "requires_action")
    assert a.tool_calls == [
        {"id": "call_7", "name": "get_weather", "arguments": '{"city": "Paris"}'}
    ]
    assert (a.input_tokens, a.output_tokens) == (20, 9)
    assert a.ttft_us == 2000
    assert a.findings == []


def test_function_call_whole_in_its_start_and_server_tools() -> None:
    call = {"type": "function_call", "id": "c1", "name": "f", "arguments": {"x": 1}}
    search = {"type": "google_search_call", "id": "s1", "arguments": {"queries": ["q"]}}
    grounding = {"type": "google_search", "count": 1}
    events = [
        created(),
        ev("step.start", index=0, step=search),
        ev("step.stop", index=0),
        ev("step.start", index=1, step={"type": "google_search_result", "call_id": "s1"}),
        ev("step.stop", index=1),
        ev("step.start", index=2, step=call),
        ev("step.stop", index=2),
        completed("requires_action", usage={"grounding_tool_count": [grounding]}),
    ]
    a = run(PATH, events, request=REQUEST)
    # Only the function call is the client's to answer.
    assert a.tool_calls == [{"id": "c1", "name": "f", "arguments": '{"x":1}'}]
    assert a.web_searches == 1
    assert a.findings == []


def test_the_content_vocabulary() -> None:
    call = {"type": "function_call", "id": "c", "name": "g"}
    interaction = {"id": ID, "status": "in_progress", "model": MODEL}
    done = {
        **interaction,
        "status": "completed",
        "usage": {"total_input_tokens": 3, "total_output_tokens": 2},
    }
    events: list[tuple[str | None, Any]] = [
        ev("interaction.start", interaction=interaction),
        ev("content.start", index=0, content={"type": "thought"}),
        ev("content.delta", index=0, delta=summary("Hm.")),
        ev("content.stop", index=0),
        ev("content.start", index=1, content={"type": "text"}),
        ev("content.delta", index=1, delta={"type": "text", "text": "Hi"}),
        ev("content.stop", index=1),
        ev("content.start", index=2, content={**call, "arguments": {}}),
        ev("content.delta", index=2, delta={**call, "arguments": {"a": "b"}}),
        ev("content.stop", index=2),
        ev("interaction.complete", interaction=done),
    ]
    a = run(PATH, events, request=REQUEST)
    assert (a.outcome, a.reason) == ("completed", "completed")
    assert (a.output_text, a.reasoning_text) == ("Hi", "Hm.")
    assert a.tool_calls == [{"id": "c", "name": "g", "arguments": '{"a":"b"}'}]
    assert (a.input_tokens, a.output_tokens) == (3, 2)
    assert a.ttft_us == 2000
    assert a.findings == []


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        ("completed", "completed"),
        ("requires_action", "completed"),
        ("incomplete", "incomplete"),
        ("budget_exceeded", "incomplete"),
        ("failed", "error"),
        ("cancelled", "aborted"),
        ("in_progress", "completed"),
    ],
)
def test_statuses(status: str, outcome: str) -> None:
    a = run(PATH, [created(), completed(status)], request=REQUEST)
    assert (a.outcome, a.reason, a.findings) == (outcome, status, [])


def test_an_error_event() -> None:
    err = {"code": "https://ai.google.dev/errors/internal", "message": "Internal error."}
    events = [*text_steps("1, 2")[:8], ev("error", error=err)]
    a = run(PATH, events, request=REQUEST)
    assert (a.outcome, a.reason) == ("error", err["code"])
    assert a.output_text == "1, 2"
    assert a.findings == []
    # Nothing may follow it.
    late = run(PATH, [*events, completed()], request=REQUEST)
    assert codes(late) == [FindingCode.EVENT_AFTER_TERMINAL]
    assert run(PATH, [created(), ev("error")], request=REQUEST).reason == "error"


def test_a_cut_stream() -> None:
    events = text_steps("1, 2, ", "3")[:9]
    cut = run(PATH, events, request=REQUEST, state="truncated")
    assert (cut.outcome, cut.reason, cut.output_text) == ("cut", "truncated", "1, 2, 3")
    assert codes(cut) == [FindingCode.NO_TERMINAL_EVENT]
    ended = run(PATH, events, request=REQUEST)
    assert (ended.outcome, ended.reason) == ("cut", "no terminal event")
    expected = "The stream ended without interaction.completed or error."
    assert [f.detail for f in ended.findings] == [expected]


DONE = ("done", "[DONE]")  # how Google ends the stream; google-genai stops reading at it


@pytest.mark.parametrize("path", [PATH, "/gateway/llm"])
def test_the_done_that_ends_a_stream_is_no_event_after_its_terminal(path: str) -> None:
    """After ``interaction.completed`` (or ``error``) the stream ends with ``event: done`` /
    ``data: [DONE]``: the end of the stream, not an event after its terminal."""
    a = run(path, [*text_steps("1, 2."), DONE], request=REQUEST)
    assert (a.api, a.outcome, a.reason, a.output_text) == (
        "interactions", "completed", "completed", "1, 2.",
    )  # fmt: skip
    assert a.findings == []
    failed = run(path, [created(), ev("error", error={"code": "x"}), DONE], request=REQUEST)
    assert (failed.outcome, failed.reason, failed.findings) == ("error", "x", [])
    # Only once: anything after it still arrived after the terminal.
    late = run(path, [*text_steps("1"), DONE, DONE], request=REQUEST)
    assert codes(late) == [FindingCode.EVENT_AFTER_TERMINAL]
    # Without a terminal, [DONE] says nothing of how the interaction ended.
    cut = run(path, [*text_steps("1")[:-1], DONE], request=REQUEST)
    assert (cut.outcome, codes(cut)) == ("cut", [FindingCode.NO_TERMINAL_EVENT])


def test_unnamed_events_are_read_by_their_event_type() -> None:
    events: list[tuple[str | None, Any]] = [(None, p) for _, p in text_steps("Hi")]
    a = run(PATH, events, request=REQUEST)
    assert (a.outcome, a.output_text, a.ttft_us, a.findings) == ("completed", "Hi", 4000, [])
    # And through a route that does not tell, event_type names the API.
    b = run("/gateway/llm", events, request=REQUEST)
    assert (b.api, b.outcome, b.findings) == ("interactions", "completed", [])


def test_unknown_events_and_odd_payloads_never_raise() -> None:
    events: list[tuple[str | None, Any]] = [
        created(),
        ev("step.delta", index=0, delta={"type": "hologram"}),
        ev("step.delta", index="x", delta="nonsense"),
        ev("step.start", index=1, step=[]),
        ev("interaction.surprise"),
        (None, {"no": "type"}),
        ev("step.delta", index=2, delta={"type": "image", "data": "iVBORw0KGgo="}),
        completed(usage={"total_output_tokens": "many"}),
    ]
    a = run(PATH, events, request=REQUEST)
    assert a.outcome == "completed"
    assert codes(a) == [FindingCode.UNKNOWN_EVENT] * 4
    assert a.ttft_us == 6000  # the image is output


def test_paths_and_bodies() -> None:
    assert apis.detect_api("/v1beta/interactions") == "interactions"
    assert apis.detect_api("/v1beta/interactions?alt=sse") == "interactions"
    body = {
        "id": ID,
        "object": "interaction",
        "model": MODEL,
        "status": "incomplete",
        "steps": [
            {"type": "user_input", "content": [{"type": "text", "text": "not output"}]},
            {"type": "thought", "summary": [{"type": "text", "text": "plan"}]},
            {"type": "model_output", "content": [{"type": "text", "text": "cut"}]},
        ],
        "usage": {"total_input_tokens": 50, "total_output_tokens": 5, "total_thought_tokens": 7},
    }
    an = Analyzer(method="POST", path=PATH, request_body=orjson.dumps({"model": MODEL}))
    a = an.finish(
        status=200,
        state="completed",
        response_body=orjson.dumps(body),
        response_content_type="application/json",
    )
    assert (a.api, a.outcome, a.reason) == ("interactions", "incomplete", "incomplete")
    assert (a.output_text, a.reasoning_text) == ("cut", "plan")
    assert (a.input_tokens, a.output_tokens, a.reasoning_tokens) == (50, 12, 7)
    assert a.findings == []
    assert apis.api_of_body(body) == "interactions"


def test_an_http_error_is_labelled_by_its_google_status() -> None:
    err = {"error": {"code": 400, "message": "Bad model.", "status": "INVALID_ARGUMENT"}}
    an = Analyzer(method="POST", path=PATH, request_body=orjson.dumps(REQUEST))
    a = an.finish(
        status=400,
        state="completed",
        response_body=orjson.dumps(err),
        response_content_type="application/json",
    )
    assert (a.outcome, a.reason) == ("http_error", "INVALID_ARGUMENT")


def test_the_timeline_classifies_both_named_and_unnamed_events() -> None:
    for name, payload in [
        ("step.delta", {"event_type": "step.delta", "index": 0, "delta": {"type": "text"}}),
        ("interaction.completed", completed()[1]),
        ("error", {"event_type": "error"}),
    ]:
        data = orjson.dumps(payload).decode()
        assert Timeline.classify(name, data, "interactions") == Timeline.classify(
            None, data, "interactions"
        )
    failed = orjson.dumps(completed("failed")[1]).decode()
    assert Timeline.classify(None, failed, "interactions") == "error"
