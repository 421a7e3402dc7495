"""Analyzer: every rule of the seed contract (seeds 000 and 001), checked against the simulator
where it produces the sequence and against hand-written streams where it does not."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ssetape.analysis.analyzer import Analysis, Analyzer
from ssetape.analysis.tally import MAX_FINDINGS
from ssetape.simulator.openai_streams import REFUSAL
from ssetape.simulator.scenario import (
    answer_tokens,
    pieces,
)
from ssetape.vocabulary import ERROR_OUTCOMES
from tests.ssetape.analysis.streams import (
    ARGS,
    CHAT,
    IMAGES,
    MESSAGES,
    PROMPT,
    RESPONSES,
    WEATHER,
    Stored,
    claude,
    codes,
    run,
    simulate,
)

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
    events: list[tuple[str | None, Any]] = [
        ("response.created", {"response": {}}),
        ("response.web_search_call.searching", {}),
        ("response.output_text.delta", {"delta": "Hi"}),
        ("response.web_search_call.searching", {}),
        ("response.completed", {"response": {}}),
    ]
    a = run(RESPONSES, events, profile="seed")
    assert (a.outcome, a.output_text) == ("completed", "Hi")
    assert [(f.code, f.event_seq) for f in a.findings] == [("unknown_event", 1)]  # once per name
    # OpenAI documents web search events: no finding there, nor for a host nothing names.
    assert run(RESPONSES, events, profile="openai").findings == []
    assert run(RESPONSES, events).findings == []
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
    # An API ssetape does not model gets no protocol finding, only the note that it is one.
    assert (a.api, a.outcome, a.reason) == ("unknown", "completed", None)
    assert [f.code for f in a.findings] == ["unknown_api"]
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


def test_gemini_errors_are_labelled_as_google_names_them() -> None:
    """An HTTP error body by its ``status`` (Gemini's own label), also when the path that
    streams a JSON array answers with one; a 200 there that is not an array says so."""
    path = "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
    error = {"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED"}}
    for body in (error, [error]):
        an = Analyzer(method="POST", path=path, request_body=None)
        a = an.finish(status=429, state="completed", response_body=orjson.dumps(body))
        assert (a.outcome, a.reason) == ("http_error", "RESOURCE_EXHAUSTED")
    an = Analyzer(method="POST", path=path, request_body=None)
    an.feed_raw(0, 0, orjson.dumps(error))  # a bare object where the array should be
    a = an.finish(status=200, state="completed", response_content_type="application/json")
    assert "invalid_json" in [f.code for f in a.findings]
