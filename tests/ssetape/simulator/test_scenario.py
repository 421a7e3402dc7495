"""plan(): the deterministic schedule of the simulated upstream, checked without a network."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ssetape.simulator import routes
from ssetape.simulator import scenario as scenarios
from ssetape.simulator.routes import plan
from ssetape.simulator.scenario import Plan

CHAT = "/v1/chat/completions"
RESPONSES = "/v1/responses"
MESSAGES = "/v1/messages"
IMAGES = "/v1/images/generations"
GZIP = {"accept-encoding": "gzip, deflate"}
# fmt: off
NEVER = {
    "response.queued", "response.output_text.annotation.added",
    "response.reasoning_summary_part.added", "response.reasoning_summary_part.done",
    "response.reasoning_summary_text.delta", "response.reasoning_summary_text.done",
}
TERMINAL = {"response.completed", "response.incomplete", "response.failed", "error"}
KEYWORDS = ("error", "cut", "pause", "refusal", "silent", "incomplete", "failed", "unresolved",
            "reasoning", "plain", "gzip", "early", "429")
TEXT_EVENTS = [
    "response.created", "response.in_progress", "response.output_item.added",
    "response.content_part.added", *["response.output_text.delta"] * 12,
    "response.output_text.done", "response.content_part.done", "response.output_item.done",
]
# fmt: on
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
}


@dataclass
class Ev:
    at: float
    event: str | None
    data: str | None
    comment: str | None

    @property
    def json(self) -> Any:
        assert self.data is not None
        return orjson.loads(self.data)


def events(p: Plan) -> list[Ev]:
    """Complete SSE blocks of a plan, each with the time its last byte is written."""
    gz = dict(p.headers).get("content-encoding") == "gzip"
    dec = zlib.decompressobj(31) if gz else None
    buf, out = b"", []
    for chunk in p.chunks:
        buf += dec.decompress(chunk.data) if dec else chunk.data
        while b"\n\n" in buf:
            raw, buf = buf.split(b"\n\n", 1)
            fields: dict[str, str] = {}
            for line in raw.decode().split("\n"):
                name, _, value = line.partition(":")
                fields.setdefault(name or "comment", value.removeprefix(" "))
            out.append(Ev(chunk.at, fields.get("event"), fields.get("data"), fields.get("comment")))
    return out


def data_events(p: Plan) -> list[Ev]:
    return [e for e in events(p) if e.data is not None]


def body(model: str = "gpt-4o", prompt: str = "Tell me about tapes", **extra: Any) -> bytes:
    user = [{"role": "user", "content": prompt}]
    return orjson.dumps({"model": model, "messages": user, "stream": True, **extra})


def rbody(model: str = "gpt-4o", prompt: str = "Tell me about tapes", **extra: Any) -> bytes:
    return orjson.dumps({"model": model, "input": prompt, "stream": True, **extra})


def chat_text(p: Plan) -> str:
    chunks = [e.json for e in data_events(p) if e.data != "[DONE]"]
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


def test_same_request_same_bytes_and_schedule() -> None:
    for path, b in [(CHAT, body()), (RESPONSES, rbody()), (MESSAGES, body("claude", max_tokens=9))]:
        assert plan("POST", path, {}, b) == plan("POST", path, {}, b)
    assert plan("POST", CHAT, {}, body(prompt="a")) != plan("POST", CHAT, {}, body(prompt="b"))


def test_speed_divides_every_delay() -> None:
    slow, fast = plan("POST", CHAT, {}, body()), plan("POST", CHAT, {}, body(), speed=10)
    assert [c.data for c in slow.chunks] == [c.data for c in fast.chunks]
    assert [c.at / 10 for c in slow.chunks] == pytest.approx([c.at for c in fast.chunks])
    with pytest.raises(ValueError):
        plan("POST", CHAT, {}, body(), speed=0)


def test_realistic_timing_at_speed_one() -> None:
    p = plan("POST", CHAT, {}, body(max_tokens=40))
    assert p.chunks[0].at == pytest.approx(scenarios.TTFB)
    gaps = [b.at - a.at for a, b in zip(p.chunks, p.chunks[1:], strict=False)]
    assert all(g >= 0 for g in gaps)
    assert 0.010 < sum(gaps) / len(gaps) < 0.030
    assert len({round(g, 4) for g in gaps}) > 10  # jittered, not a metronome


def test_chat_stream_follows_seed_000() -> None:
    for include in (True, False):
        extra: dict[str, Any] = {"stream_options": {"include_usage": True}} if include else {}
        p = plan("POST", CHAT, {}, body(**extra))
        assert p.stream and p.status == 200 and not p.cut
        assert dict(p.headers)["content-type"].startswith("text/event-stream")
        evs = data_events(p)
        first, *content, finish, usage, done = evs
        role = {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
        assert first.json["choices"] == [role]
        assert all(e.json["choices"][0]["delta"]["content"] for e in content)
        assert finish.json["choices"][0] == {"index": 0, "delta": {}, "finish_reason": "stop"}
        tokens = usage.json["usage"]
        assert tokens["completion_tokens"] == 12
        assert tokens["total_tokens"] == tokens["prompt_tokens"] + 12
        empty = [{"index": 0, "delta": {}, "finish_reason": None}]
        assert usage.json["choices"] == ([] if include else empty)
        assert done.data == "[DONE]"
        assert {e.json["id"] for e in evs[:-1]} == {first.json["id"]}
        assert first.json["id"].startswith("gen-")
        comments = [e.comment for e in events(p) if e.comment]
        assert comments == ["OPENROUTER PROCESSING", "OPENROUTER PROCESSING"]


def test_answer_text_is_seeded_and_has_non_ascii() -> None:
    text = chat_text(plan("POST", CHAT, {}, body(prompt="same question")))
    assert text == chat_text(plan("POST", CHAT, {}, body("other", prompt="same question")))
    assert not text.isascii() and text.endswith(".")
    assert text == "".join(scenarios.answer_tokens("same question", 12))


def test_length_follows_the_token_limit() -> None:
    p = plan("POST", CHAT, {}, body(max_tokens=30))
    assert data_events(p)[-2].json["usage"]["completion_tokens"] == 30
    short = plan("POST", CHAT, {}, body(max_completion_tokens=4))
    assert data_events(short)[-3].json["choices"][0]["finish_reason"] == "length"
    assert chat_text(short) == "".join(scenarios.answer_tokens("Tell me about tapes", 12)[:4])


def test_chunk_boundary_variety_and_plain() -> None:
    p = plan("POST", CHAT, {}, body())
    datas = [c.data for c in p.chunks]
    assert len([d for d in datas if not d.endswith(b"\n")]) >= 2  # split mid-line, mid-UTF-8
    broken_utf8 = 0
    for d in datas:
        try:
            d.decode()
        except UnicodeDecodeError:
            broken_utf8 += 1
    assert broken_utf8 >= 1
    assert any(d.count(b"\n\n") >= 2 for d in datas)  # two events share a write
    plain = plan("POST", CHAT, {}, body("gpt-4o-sim-plain"))
    assert all(c.data.endswith(b"\n\n") and c.data.count(b"\n\n") == 1 for c in plain.chunks)
    assert chat_text(plain) == chat_text(p)


def test_pause_sends_keep_alive_comments() -> None:
    p = plan("POST", CHAT, {}, body("gpt-4o-sim-pause"))
    keep = [e for e in events(p) if e.comment == "keep-alive"]
    assert len(keep) == 2
    before = max(c.at for c in p.chunks if c.at < keep[0].at)
    after = next(c for c in p.chunks if c.at > keep[-1].at)
    assert [k.at - before for k in keep] == pytest.approx([0.5, 1.0])
    assert scenarios.PAUSE <= after.at - before <= scenarios.PAUSE + 0.03


def test_chat_tool_call_and_after_tool_result() -> None:
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]
    evs = data_events(plan("POST", CHAT, {}, body(tools=tools)))
    calls = [e.json["choices"][0]["delta"]["tool_calls"][0] for e in evs[1:-3]]
    assert calls[0]["function"] == {"name": "get_weather", "arguments": ""}
    args = "".join(c["function"]["arguments"] for c in calls)
    assert orjson.loads(args) == {"city": "Zürich", "days": 3} and len(calls) > 3
    assert evs[-3].json["choices"][0]["finish_reason"] == "tool_calls"
    messages = [{"role": "user", "content": "hi"}, {"role": "tool", "content": "sunny"}]
    again = orjson.dumps({"model": "m", "messages": messages, "tools": tools, "stream": True})
    finish = data_events(plan("POST", CHAT, {}, again))[-3].json["choices"][0]["finish_reason"]
    assert finish == "stop"


def test_chat_error_and_cut() -> None:
    evs = data_events(plan("POST", CHAT, {}, body("x-sim-error")))
    last = evs[-1].json
    assert last["error"]["code"] == "server_error" and last["error"]["message"]
    assert last["choices"][0]["finish_reason"] == "error"
    assert all(e.data != "[DONE]" for e in evs)
    cut = plan("POST", CHAT, {}, body("x-sim-cut"))
    assert cut.cut and not cut.chunks[-1].data.endswith(b"\n")


def responses_types(p: Plan) -> list[str]:
    evs = data_events(p)
    assert [e.json["sequence_number"] for e in evs] == list(range(len(evs)))
    assert all(e.event == e.json["type"] for e in evs)
    types = [e.event or "" for e in evs]
    assert not NEVER & set(types)
    assert sum(t in TERMINAL for t in types) == 1 and types[-1] in TERMINAL
    return types


def test_responses_text_follows_seed_001() -> None:
    assert responses_types(plan("POST", RESPONSES, {}, rbody())) == [
        *TEXT_EVENTS,
        "response.completed",
    ]


def test_responses_variants() -> None:
    tools = [{"type": "function", "name": "get_weather", "parameters": WEATHER}]
    types = responses_types(plan("POST", RESPONSES, {}, rbody(tools=tools)))
    assert types[2:4] == ["response.output_item.added", "response.function_call_arguments.delta"]
    assert types[-3:] == [
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    types = responses_types(plan("POST", RESPONSES, {}, rbody("gpt-4o-sim-refusal")))
    i = types.index("response.content_part.done")
    assert types[i + 1 : i + 3] == ["response.content_part.added", "response.refusal.delta"]
    assert types[-4:] == [
        "response.refusal.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    silent = responses_types(plan("POST", RESPONSES, {}, rbody("m-sim-refusal-silent")))
    assert "response.refusal.delta" not in silent and "response.refusal.done" in silent
    types = responses_types(plan("POST", RESPONSES, {}, rbody("o3-mini")))
    assert types[2:4] == ["response.output_item.added", "response.reasoning_text.delta"]
    assert "response.reasoning_text.done" in types and types[-1] == "response.completed"
    p = plan("POST", RESPONSES, {}, rbody(max_output_tokens=5))
    assert responses_types(p)[-1] == "response.incomplete"
    final = data_events(p)[-1].json["response"]
    assert final["incomplete_details"] == {"reason": "max_output_tokens"}
    assert final["usage"]["output_tokens"] == 5
    p = plan("POST", RESPONSES, {}, rbody("m-sim-failed"))
    assert responses_types(p)[-1] == "response.failed"
    assert data_events(p)[-1].json["response"]["error"]["code"] == "server_error"
    p = plan("POST", RESPONSES, {}, rbody("m-sim-unresolved"))
    assert responses_types(p)[-1] == "error"
    assert data_events(p)[-1].json["code"] == "response_unresolved"


def test_messages_events() -> None:
    tools = [{"name": "get_weather", "input_schema": WEATHER}]
    b = body(
        "claude-x",
        max_tokens=2048,
        thinking={"type": "enabled", "budget_tokens": 1024},
        tools=tools,
    )
    evs = data_events(plan("POST", MESSAGES, {}, b))
    types = [e.event for e in evs]
    assert types[:3] == ["message_start", "ping", "content_block_start"]
    assert types[-2:] == ["message_delta", "message_stop"]
    assert evs[0].json["message"]["usage"]["input_tokens"] > 0
    deltas = [e.json["delta"]["type"] for e in evs if e.event == "content_block_delta"]
    assert deltas.index("signature_delta") < deltas.index("text_delta")
    assert deltas[-1] == "input_json_delta"
    final = evs[-2].json
    assert final["delta"]["stop_reason"] == "tool_use"
    assert final["usage"]["output_tokens"] == len(deltas) - 2  # signature and "" carry no token
    err = data_events(plan("POST", MESSAGES, {}, body("claude-sim-error", max_tokens=10)))
    assert err[-1].event == "error" and err[-1].json["error"]["type"] == "overloaded_error"
    assert "message_stop" not in [e.event for e in err]


def test_images_events_and_errors() -> None:
    b = orjson.dumps(
        {"model": "gpt-image-1", "prompt": "a tape", "stream": True, "partial_images": 2}
    )
    for path in (IMAGES, "/v1/images"):
        evs = data_events(plan("POST", path, {}, b))
        assert [e.event for e in evs] == ["image_generation.partial_image"] * 2 + [
            "image_generation.completed",
            None,
        ]
        assert evs[-1].data == "[DONE]" and evs[2].json["usage"]["total_tokens"] > 0
    early = orjson.dumps(
        {"model": "gpt-image-1-sim-error-early", "prompt": "x", "stream": True, "partial_images": 2}
    )
    assert [e.event for e in data_events(plan("POST", IMAGES, {}, early))] == ["error"]
    late = early.replace(b"-early", b"")
    assert [e.event for e in data_events(plan("POST", IMAGES, {}, late))][-1] == "error"


def test_http_errors_before_the_stream() -> None:
    p = plan("POST", CHAT, {}, body("gpt-4o-sim-429"))
    assert p.status == 429 and not p.stream and dict(p.headers)["retry-after"] == "1"
    assert orjson.loads(p.chunks[0].data)["error"]["code"] == "rate_limit_exceeded"
    p = plan("POST", MESSAGES, {}, body("claude-sim-500", max_tokens=5))
    assert p.status == 500 and orjson.loads(p.chunks[0].data)["error"]["type"] == "api_error"
    p = plan("POST", "/v1/nothing", {}, b"{}")
    assert p.status == 404 and orjson.loads(p.chunks[0].data)["error"]["code"] == "unknown_url"
    assert plan("GET", CHAT, {}, b"").status == 405
    assert plan("POST", CHAT, {}, b"{not json").status == 400


def test_routes_by_suffix() -> None:
    assert data_events(plan("POST", "/api/v1/chat/completions?x=1", {}, body()))[-1].data == (
        "[DONE]"
    )
    assert routes.route("/openai/v1/responses") == "responses"
    assert routes.route("/anthropic/v1/messages/") == "messages"


def test_non_streamed_json() -> None:
    for path, b in [
        (CHAT, body()),
        (RESPONSES, rbody()),
        (MESSAGES, body("claude", max_tokens=9)),
        (IMAGES, orjson.dumps({"model": "gpt-image-1", "prompt": "x"})),
    ]:
        p = plan("POST", path, {}, b.replace(b'"stream":true', b'"stream":false'))
        assert not p.stream and len(p.chunks) == 1
        assert dict(p.headers)["content-length"] == str(len(p.chunks[0].data))
        assert isinstance(orjson.loads(p.chunks[0].data), dict)


def test_gzip_streams_with_a_sync_flush_per_chunk() -> None:
    b = body("gpt-4o-sim-gzip")
    assert "content-encoding" not in dict(plan("POST", CHAT, {}, b).headers)
    p = plan("POST", CHAT, GZIP, b)
    assert dict(p.headers)["content-encoding"] == "gzip"
    plain = plan("POST", CHAT, {}, b)
    dec = zlib.decompressobj(31)
    assert [dec.decompress(c.data) for c in p.chunks] == [c.data for c in plain.chunks]
    assert dec.eof


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    path=st.sampled_from([CHAT, RESPONSES, MESSAGES, IMAGES]),
    words=st.lists(st.sampled_from(KEYWORDS), max_size=3),
    prompt=st.text(max_size=30),
    limit=st.none() | st.integers(1, 60),
    stream=st.booleans(),
    tools=st.booleans(),
)
def test_any_request_gives_a_well_formed_plan(
    path: str, words: list[str], prompt: str, limit: int | None, stream: bool, tools: bool
) -> None:
    extra: dict[str, Any] = {"stream": stream}
    if limit is not None:
        extra["max_tokens"] = limit
    if tools:  # one tool in the shapes of all three APIs
        function = {"name": "f", "parameters": WEATHER}
        extra["tools"] = [
            {"type": "function", **function, "input_schema": WEATHER, "function": function}
        ]
    user = [{"role": "user", "content": prompt}]
    model = "-".join(["m", "sim", *words])
    b = orjson.dumps({"model": model, "messages": user, "input": prompt, "prompt": prompt, **extra})
    p = plan("POST", path, GZIP, b, speed=3)
    assert p == plan("POST", path, GZIP, b, speed=3)
    assert p.chunks and all(c.data for c in p.chunks)
    assert all(a.at <= b.at for a, b in zip(p.chunks, p.chunks[1:], strict=False))
    if p.stream and not p.cut:
        for e in data_events(p):
            assert e.data == "[DONE]" or isinstance(e.json, dict)
