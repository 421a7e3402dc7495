"""The simulator served over real sockets, read by the official openai and anthropic SDKs."""

from __future__ import annotations

import asyncio
import base64
import gc
import socket
import statistics
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import h11
import httpx
import openai
import orjson
import pytest

from ssetape.simulator.routes import plan
from ssetape.simulator.scenario import Plan
from ssetape.simulator.simulator import Simulator

SPEED = 10.0  # fast enough that every SDK call here takes a few tens of milliseconds
TIMING_SPEED = 3.0  # slow enough that the schedule stands out from scheduler noise
TOLERANCE = 0.03
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
}
CHAT = "/v1/chat/completions"
USER: Any = [{"role": "user", "content": "How do tapes work?"}]


@dataclass
class Ev:
    at: float
    event: str | None
    data: str

    @property
    def json(self) -> Any:
        return orjson.loads(self.data)


def planned_events(p: Plan) -> list[Ev]:
    """The data events of a plan, each with the time its last byte is written."""
    dec = zlib.decompressobj(31) if dict(p.headers).get("content-encoding") == "gzip" else None
    buf, out = b"", []
    for chunk in p.chunks:
        buf += dec.decompress(chunk.data) if dec else chunk.data
        while b"\n\n" in buf:
            raw, buf = buf.split(b"\n\n", 1)
            fields = dict(line.partition(": ")[::2] for line in raw.decode().split("\n"))
            if "data" in fields:
                out.append(Ev(chunk.at, fields.get("event"), fields["data"]))
    return out


class Clients:
    """Both SDKs pointed at one simulator; keeps what they send, to plan it again."""

    def __init__(self, sim: Simulator) -> None:
        self.sim, self.sent = sim, list[httpx.Request]()
        # Each SDK's own client class: httpx on older SDKs, httpx2 on openai 3 / anthropic 2.
        hooks = {"request": [self.sent.append]}
        self.oai = openai.OpenAI(
            base_url=sim.url + "/v1",
            api_key="sk-test",
            max_retries=0,
            http_client=openai.DefaultHttpxClient(event_hooks=hooks),
        )
        self.claude = anthropic.Anthropic(
            base_url=sim.url,
            api_key="sk-ant-test",
            max_retries=0,
            http_client=anthropic.DefaultHttpxClient(event_hooks=hooks),
        )
        # The first calls pay one-time costs (client setup, lazily built pydantic validators
        # for the event types) that are not the server's and would blur the timing checks.
        list(self.oai.chat.completions.create(model="warm-up", messages=USER, stream=True))
        list(self.claude.messages.create(model="warm", max_tokens=5, messages=USER, stream=True))

    def plan(self) -> Plan:
        """The plan of the last request, as the simulator made it."""
        r = self.sent[-1]
        headers = {k.lower(): v for k, v in r.headers.items()}
        return plan(r.method, r.url.raw_path.decode(), headers, r.read(), speed=self.sim.speed)


@pytest.fixture(scope="module")
def c() -> Iterator[Clients]:
    with Simulator(speed=SPEED).serve_in_thread() as sim:
        yield Clients(sim)


@pytest.fixture(scope="module")
def slow() -> Iterator[Clients]:
    with Simulator(speed=TIMING_SPEED).serve_in_thread() as sim:
        yield Clients(sim)


def assert_on_schedule(measured: list[float], planned: list[float], start: float) -> None:
    """Every arrival is its planned delay after ``start`` plus one constant client overhead
    (taken as the median, so one late wake-up does not shift the others)."""
    assert len(measured) == len(planned)
    offsets = [m - start - p for m, p in zip(measured, planned, strict=True)]
    overhead = statistics.median(offsets)
    assert -0.005 <= overhead <= 0.1, offsets
    assert all(abs(o - overhead) <= TOLERANCE for o in offsets), offsets


def test_chat_stream_with_and_without_include_usage(c: Clients) -> None:
    for include in (True, False):
        extra: Any = {"stream_options": {"include_usage": True}} if include else {}
        chunks = list(
            c.oai.chat.completions.create(model="gpt-4o", messages=USER, stream=True, **extra)
        )
        expected = planned_events(c.plan())[:-1]  # the SDK stops at [DONE]
        assert [ch.model_dump(exclude_unset=True) for ch in chunks] == [e.json for e in expected]
        first, *content, finish, usage = chunks
        assert first.choices[0].delta.role == "assistant"
        text = "".join(ch.choices[0].delta.content or "" for ch in content)
        assert text == "".join(e.json["choices"][0]["delta"]["content"] for e in expected[1:-2])
        assert not text.isascii() and len(content) == 12
        assert finish.choices[0].finish_reason == "stop"
        assert usage.usage is not None and usage.usage.completion_tokens == 12
        assert usage.usage.total_tokens == usage.usage.prompt_tokens + 12
        assert len(usage.choices) == (0 if include else 1)


def test_chat_tool_call(c: Clients) -> None:
    tools: Any = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]
    chunks = list(c.oai.chat.completions.create(model="m", messages=USER, tools=tools, stream=True))
    calls = [tc for ch in chunks if ch.choices for tc in ch.choices[0].delta.tool_calls or []]
    assert calls[0].function is not None and calls[0].function.name == "get_weather"
    args = "".join(tc.function.arguments or "" for tc in calls if tc.function)
    assert orjson.loads(args) == {"city": "Zürich", "days": 3}
    reasons = [ch.choices[0].finish_reason for ch in chunks if ch.choices]
    assert [r for r in reasons if r] == ["tool_calls"]


def test_chat_error_event_raises_api_error(c: Clients) -> None:
    got: list[str] = []
    with pytest.raises(openai.APIError, match="failed while generating") as info:
        for ch in c.oai.chat.completions.create(model="x-sim-error", messages=USER, stream=True):
            got.append(ch.choices[0].delta.content or "")
    assert info.value.code == "server_error"
    events = planned_events(c.plan())
    assert events[-1].json["choices"][0]["finish_reason"] == "error"
    assert len(got) == len(events) - 1 and 0 < len("".join(got)) < 60


def a_cut(error: BaseException) -> bool:
    """The transport's protocol error (httpx's, or httpx2's under openai 3 / anthropic 2),
    raised as it is or wrapped by the SDK."""
    return any(type(e).__name__ == "RemoteProtocolError" for e in (error, error.__cause__))


def test_cut_stream_raises_a_protocol_error(c: Clients) -> None:
    calls = [
        lambda: c.oai.chat.completions.create(model="x-sim-cut", messages=USER, stream=True),
        lambda: c.oai.responses.create(model="x-sim-cut", input="Hi", stream=True),
        lambda: c.claude.messages.create(
            model="c-sim-cut", max_tokens=50, messages=USER, stream=True
        ),
    ]
    for call in calls:
        with pytest.raises(Exception) as cut:  # which class depends on the SDK
            list(call())
        assert a_cut(cut.value), repr(cut.value)


def test_http_errors_before_the_stream(c: Clients) -> None:
    with pytest.raises(openai.RateLimitError) as limited:
        c.oai.chat.completions.create(model="x-sim-429", messages=USER, stream=True)
    assert limited.value.response.headers["retry-after"] == "1"
    with pytest.raises(openai.InternalServerError):
        c.oai.responses.create(model="x-sim-500", input="hi", stream=True)
    with pytest.raises(anthropic.OverloadedError):
        c.claude.messages.create(model="c-sim-529", max_tokens=5, messages=USER, stream=True)
    response = httpx.post(c.sim.url + "/v1/unknown", json={})
    assert response.status_code == 404 and response.json()["error"]["code"] == "unknown_url"


RESPONSES_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("gpt-4o", {}, "completed"),
    ("gpt-4o", {"tools": [{"type": "function", "name": "f", "parameters": WEATHER}]}, "completed"),
    ("gpt-4o-sim-refusal", {}, "completed"),
    ("gpt-4o-sim-refusal-silent", {}, "completed"),
    ("o4-mini", {}, "completed"),
    ("gpt-4o", {"max_output_tokens": 5}, "incomplete"),
    ("gpt-4o-sim-failed", {}, "failed"),
    ("gpt-4o-sim-error", {}, "failed"),
    ("gpt-4o-sim-unresolved", {}, "unresolved"),
    ("gpt-4o-sim-pause-gzip-plain", {}, "completed"),
]


@pytest.mark.parametrize(("model", "extra", "outcome"), RESPONSES_CASES)
def test_responses_stream(c: Clients, model: str, extra: dict[str, Any], outcome: str) -> None:
    events = list(c.oai.responses.create(model=model, input="Hi", stream=True, **extra))
    expected = planned_events(c.plan())
    assert [e.type for e in events] == [e.event for e in expected]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1]
    if outcome == "unresolved":
        assert final.type == "error" and final.code == "response_unresolved"
        return
    assert final.type == f"response.{outcome}"
    response = final.response
    assert response.status == outcome
    assert response.usage is not None
    assert response.usage.total_tokens == response.usage.input_tokens + (
        response.usage.output_tokens
    )
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    if outcome == "failed":
        assert response.error is not None and response.error.code == "server_error"
        assert deltas
        return
    assert deltas == response.output_text
    if outcome == "incomplete":
        assert response.incomplete_details is not None
        assert response.incomplete_details.reason == "max_output_tokens"
        assert response.usage.output_tokens == 5
    if "tools" in extra:
        call = response.output[-1]
        assert call.type == "function_call" and orjson.loads(call.arguments)["days"] == 3
    if "refusal" in model:
        done = next(e for e in events if e.type == "response.refusal.done")
        assert done.refusal == (
            "" if "silent" in model else "I'm sorry, but I can't help with that."
        )
    if model.startswith("o4"):
        reasoning = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
        assert reasoning and response.usage.output_tokens_details.reasoning_tokens == 8


def test_responses_stream_helper(c: Clients) -> None:
    with c.oai.responses.stream(model="gpt-5", input="Hi") as stream:
        for _ in stream:
            pass
        final = stream.get_final_response()
    assert final.output_text and final.output[0].type == "reasoning"


def test_anthropic_raw_stream(c: Clients) -> None:
    events = list(
        c.claude.messages.create(model="claude", max_tokens=64, messages=USER, stream=True)
    )
    expected = [e for e in planned_events(c.plan()) if e.event != "ping"]
    assert [e.type for e in events] == [e.event for e in expected]
    assert [e.type for e in events][:2] == ["message_start", "content_block_start"]
    start, delta = events[0], events[-2]
    assert start.type == "message_start" and start.message.usage.input_tokens > 0
    assert delta.type == "message_delta" and delta.delta.stop_reason == "end_turn"
    assert delta.usage.output_tokens == 64
    deltas = [e.delta for e in events if e.type == "content_block_delta"]
    text = "".join(d.text for d in deltas if d.type == "text_delta")
    assert len(text.split()) == 64
    assert "ping" in [e.event for e in planned_events(c.plan())]


def test_anthropic_stream_with_thinking_and_tools(c: Clients) -> None:
    tools: Any = [{"name": "get_weather", "input_schema": WEATHER}]
    with c.claude.messages.stream(
        model="claude-sonnet",
        max_tokens=2048,
        thinking={"type": "enabled", "budget_tokens": 1024},
        tools=tools,
        messages=USER,
    ) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_message()
    assert [b.type for b in final.content] == ["thinking", "text", "tool_use"]
    thinking, text, tool = final.content
    assert thinking.type == "thinking" and thinking.thinking and thinking.signature
    assert text.type == "text" and "get_weather" in text.text
    assert tool.type == "tool_use" and tool.input == {"city": "Zürich", "days": 3}
    assert final.stop_reason == "tool_use" and final.usage.output_tokens > 10
    assert "thinking" in kinds and "signature" in kinds and "input_json" in kinds


def test_anthropic_error_event_raises(c: Clients) -> None:
    with pytest.raises(anthropic.APIStatusError) as info:
        list(
            c.claude.messages.create(model="c-sim-error", max_tokens=20, messages=USER, stream=True)
        )
    assert info.value.body == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
    }


def test_image_stream(c: Clients) -> None:
    events = list(
        c.oai.images.generate(model="gpt-image-1", prompt="a tape", stream=True, partial_images=2)
    )
    assert [e.type for e in events] == ["image_generation.partial_image"] * 2 + [
        "image_generation.completed"
    ]
    done = events[-1]
    assert done.type == "image_generation.completed" and done.usage.total_tokens > 0
    assert base64.b64decode(done.b64_json).startswith(b"\x89PNG\r\n\x1a\n")
    with pytest.raises(openai.APIError, match="failed"):
        list(
            c.oai.images.generate(
                model="gpt-image-1-sim-error", prompt="x", stream=True, partial_images=1
            )
        )


def test_non_streamed_json(c: Clients) -> None:
    completion = c.oai.chat.completions.create(model="gpt-4o", messages=USER)
    assert completion.choices[0].message.content and completion.usage is not None
    response = c.oai.responses.create(model="gpt-4o", input="Hi")
    assert response.status == "completed" and response.output_text
    message = c.claude.messages.create(model="claude", max_tokens=7, messages=USER)
    assert message.content[0].type == "text" and message.stop_reason == "max_tokens"
    image = c.oai.images.generate(model="gpt-image-1", prompt="a tape")
    assert image.data and image.data[0].b64_json


def test_gzip_stream_through_the_sdk(c: Clients) -> None:
    with c.oai.chat.completions.with_streaming_response.create(
        model="gpt-4o-sim-gzip", messages=USER, stream=True
    ) as raw:
        assert raw.headers["content-encoding"] == "gzip"
        chunks = list(raw.parse())
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)


@pytest.mark.parametrize("api", ["chat", "messages"])
def test_sdk_events_arrive_on_schedule(slow: Clients, api: str) -> None:
    gc.collect()  # a full collection in the middle would look like a late event
    start, arrivals = time.perf_counter(), []
    if api == "chat":
        stream: Any = slow.oai.chat.completions.create(
            model="gpt-sim-pause", messages=USER, stream=True
        )
    else:
        stream = slow.claude.messages.create(
            model="c-sim-pause-gzip", max_tokens=20, messages=USER, stream=True
        )
    for _ in stream:
        arrivals.append(time.perf_counter())
    # The SDKs yield neither [DONE] nor ping.
    planned = [
        e.at for e in planned_events(slow.plan()) if e.data != "[DONE]" and e.event != "ping"
    ]
    assert planned[-1] > 0.6  # the pause is in there
    assert_on_schedule(arrivals, planned, start)


class RawConnection:
    """One keep-alive HTTP/1.1 connection that reports each chunk of a response body."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.conn = h11.Connection(h11.CLIENT)

    def post(self, path: str, body: bytes, *headers: tuple[str, str]) -> tuple[Any, Any, bool]:
        """(response head, [(arrival, chunk)], whether the body ended properly)."""
        if self.conn.our_state is h11.DONE:
            self.conn.start_next_cycle()
        fields = [("host", "sim"), ("content-length", str(len(body))), *headers]
        request = h11.Request(method="POST", target=path, headers=fields)
        for out in (request, h11.Data(data=body), h11.EndOfMessage()):
            self.sock.sendall(self.conn.send(out) or b"")
        head, chunks, part = None, list[tuple[float, bytes]](), b""
        while True:
            try:
                event = self.conn.next_event()
            except h11.RemoteProtocolError:  # the server closed mid-body
                return head, chunks, False
            if event is h11.NEED_DATA:
                self.conn.receive_data(self.sock.recv(65536))
            elif isinstance(event, h11.Response):
                head = event
            elif isinstance(event, h11.Data):
                part += event.data
                if event.chunk_end:
                    chunks.append((time.perf_counter(), part))
                    part = b""
            elif isinstance(event, h11.EndOfMessage):
                return head, chunks, True


def test_each_planned_chunk_is_one_http_chunk_on_time(slow: Clients) -> None:
    body = orjson.dumps({"model": "gpt-sim-pause", "messages": USER, "stream": True})
    expected = plan("POST", CHAT, {}, body, speed=TIMING_SPEED)
    raw = RawConnection(slow.sim.port)
    start = time.perf_counter()
    head, chunks, complete = raw.post(CHAT, body)
    raw.sock.close()
    assert head.status_code == 200 and (b"transfer-encoding", b"chunked") in head.headers
    assert complete and [d for _, d in chunks] == [c.data for c in expected.chunks]
    assert not all(d.endswith(b"\n\n") for _, d in chunks)  # split events stay split
    assert_on_schedule([t for t, _ in chunks], [c.at for c in expected.chunks], start)


def test_gzip_cut_and_keep_alive_on_one_connection(c: Clients) -> None:
    gz = orjson.dumps({"model": "gpt-sim-gzip", "messages": USER, "stream": True})
    accept = ("accept-encoding", "gzip")
    expected = plan("POST", CHAT, dict([accept]), gz, speed=SPEED)
    raw = RawConnection(c.sim.port)
    for _ in range(2):  # keep-alive: the same socket serves the next request
        head, chunks, complete = raw.post("/api" + CHAT, gz, accept)
        assert (b"content-encoding", b"gzip") in head.headers and complete
        assert [d for _, d in chunks] == [x.data for x in expected.chunks]
    cut = orjson.dumps({"model": "c-sim-cut", "messages": USER, "max_tokens": 9, "stream": True})
    head, chunks, complete = raw.post("/v1/messages", cut)
    raw.sock.close()
    assert not complete and chunks
    assert [d for _, d in chunks] == [
        x.data for x in plan("POST", "/v1/messages", {}, cut, speed=SPEED).chunks
    ]


def test_async_start_serve_forever_and_stop() -> None:
    async def main() -> None:
        sim = Simulator(speed=20)
        await sim.start()
        assert sim.url == f"http://127.0.0.1:{sim.port}"
        server = asyncio.create_task(sim.serve_forever())
        async with httpx.AsyncClient() as client:
            body = {"model": "gpt-4o", "messages": USER, "stream": True}
            response = await client.post(sim.url + CHAT, json=body)
            assert response.text.endswith("data: [DONE]\n\n")
            port = sim.port
            server.cancel()
            with pytest.raises(asyncio.CancelledError):
                await server
        with pytest.raises(OSError):
            await asyncio.open_connection("127.0.0.1", port)

    asyncio.run(main())
