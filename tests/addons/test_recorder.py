"""The record path end to end: official SDKs -> real `ssetape record` -> simulator -> SQLite."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest

from ssetape.framing.decoders import decode
from ssetape.framing.sse import SseParser
from ssetape.simulator.routes import plan
from ssetape.simulator.simulator import Simulator
from ssetape.storage.models import Event, Exchange
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from tests.conftest import SIM_SPEED, Proc

CHAT = {
    "model": "sim-chat",
    "stream": True,
    "stream_options": {"include_usage": True},
    "messages": [{"role": "user", "content": "Tell me about café tapes"}],
}
# Every kind of stream the simulator makes, as (path, body).
STREAMS: list[tuple[str, dict[str, Any]]] = [
    ("/v1/chat/completions", CHAT),
    ("/v1/chat/completions", {**CHAT, "stream_options": None, "model": "sim-plain"}),
    ("/v1/chat/completions", {**CHAT, "model": "sim-error"}),
    ("/v1/chat/completions", {**CHAT, "model": "sim-pause"}),
    ("/v1/responses", {"model": "sim-r", "stream": True, "input": "hi"}),
    ("/v1/responses", {"model": "sim-refusal", "stream": True, "input": "hi"}),
    ("/v1/responses", {"model": "sim-reasoning", "stream": True, "input": "hi"}),
    ("/v1/responses", {"model": "sim-r", "stream": True, "input": "hi", "max_output_tokens": 3}),
    ("/v1/responses", {"model": "sim-failed", "stream": True, "input": "hi"}),
    ("/v1/responses", {"model": "sim-unresolved", "stream": True, "input": "hi"}),
    (
        "/v1/messages",
        {
            "model": "sim-m",
            "stream": True,
            "max_tokens": 50,
            "messages": [{"role": "user", "content": "hi"}],
        },
    ),
    (
        "/v1/messages",
        {
            "model": "sim-error",
            "stream": True,
            "max_tokens": 50,
            "messages": [{"role": "user", "content": "hi"}],
        },
    ),
    (
        "/v1/images/generations",
        {"model": "sim-img", "stream": True, "prompt": "x", "partial_images": 2},
    ),
    ("/v1/chat/completions", {**CHAT, "stream": False}),
]


def raw_stream(base: str, path: str, body: dict[str, Any], **kw: Any) -> tuple[int, bytes]:
    with (
        httpx.Client(timeout=30, **kw) as c,
        c.stream("POST", base + path, content=orjson.dumps(body)) as r,
    ):
        return r.status_code, b"".join(r.iter_raw())


def only(store: Store) -> tuple[Exchange, list[Event]]:
    rows = Queries(store).exchanges()
    assert len(rows) == 1, [(x.path, x.state) for x in rows]
    return rows[0], list(Queries(store).events(rows[0].id))


def expected_event_times(path: str, body: dict[str, Any]) -> list[float]:
    """When the simulator completes each SSE block, per its plan."""
    p = plan("POST", path, {}, orjson.dumps(body), speed=SIM_SPEED)
    parser, times = SseParser(), []
    for chunk in p.chunks:
        times += [chunk.at] * len(parser.feed(chunk.data))
    return times + [p.chunks[-1].at] * len(parser.close())


def stop_and_open(proc: Proc) -> Store:
    assert proc.stop() == 0, proc.log.decode()
    return Store.open(proc.db, create=False)


@pytest.mark.parametrize(("path", "body"), STREAMS, ids=lambda v: str(v)[:40])
def test_client_gets_identical_bytes_and_store_keeps_them(
    sim: Simulator, ssetape_proc: Callable[..., Proc], path: str, body: dict[str, Any]
) -> None:
    status, direct = raw_stream(sim.url, path, body)
    proc = ssetape_proc("record", "--mode", f"reverse:{sim.url}")
    status2, proxied = raw_stream(proc.url, path, body)
    assert (status2, proxied) == (status, direct)

    store = stop_and_open(proc)
    x, events = only(store)
    assert (x.state, x.status, x.method, x.path) == ("completed", status, "POST", path)
    if body["stream"]:
        assert x.is_stream
        assert b"".join(e.raw for e in events) == direct
        assert x.event_count == len(events) > 0
        offsets = [e.offset_us for e in events]
        assert offsets == sorted(offsets)
        assert 0 < x.ttfb_us <= offsets[0]  # type: ignore[operator]
    else:
        assert x.response_body == direct and events == []
    store.close()


def test_recorded_gaps_follow_the_upstream_schedule(
    sim: Simulator, ssetape_proc: Callable[..., Proc]
) -> None:
    body = {**CHAT, "model": "sim-pause"}
    proc = ssetape_proc("record", "--mode", f"reverse:{sim.url}")
    raw_stream(proc.url, "/v1/chat/completions", body)
    store = stop_and_open(proc)
    _, events = only(store)
    expected = expected_event_times("/v1/chat/completions", body)
    assert len(events) == len(expected)
    got = [e.offset_us / 1e6 for e in events]
    assert got[0] >= expected[0] - 0.002
    # Gaps, not absolute times: the hop adds a small constant. The simulator shares a core
    # with the other tests, so its own sends run late under load (35 ms seen with a browser
    # test beside it): 60 ms still tells a recorded pause from one the proxy made up or lost.
    for i in range(1, len(got)):
        assert abs((got[i] - got[i - 1]) - (expected[i] - expected[i - 1])) < 0.06, i
    store.close()


def test_openai_sdk_chat_and_responses_forward_mode(
    sim: Simulator, ssetape_proc: Callable[..., Proc]
) -> None:
    def run(client: openai.OpenAI) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        chat = client.chat.completions.create(
            model="sim-chat",
            stream=True,
            stream_options={"include_usage": True},
            messages=[{"role": "user", "content": "hello there"}],
        )
        resp = client.responses.create(model="sim-r", stream=True, input="hello there")
        return [c.model_dump() for c in chat], [e.model_dump() for e in resp]

    direct = run(openai.OpenAI(base_url=sim.url + "/v1", api_key="sk-x", max_retries=0))
    proc = ssetape_proc("record")
    with openai.DefaultHttpxClient(proxy=proc.url) as http:
        proxied = run(
            openai.OpenAI(base_url=sim.url + "/v1", api_key="sk-x", max_retries=0, http_client=http)
        )
    assert proxied == direct
    assert direct[0][-1]["usage"]["total_tokens"] > 0
    assert direct[1][-1]["type"] == "response.completed"

    store = stop_and_open(proc)
    rows = sorted(Queries(store).exchanges(), key=lambda x: x.id)
    assert [(x.path, x.event_count) for x in rows] == [
        ("/v1/chat/completions", len(list(Queries(store).events(rows[0].id)))),
        ("/v1/responses", len(list(Queries(store).events(rows[1].id)))),
    ]
    # The SDK closes the connection once it has read [DONE]; when that beats the end of the
    # chunked body to the proxy, the transport state is "aborted" (which is true), while the
    # stream itself ended properly: the outcome says so either way.
    assert rows[0].state in ("completed", "aborted") and rows[1].state == "completed"
    assert [x.outcome for x in rows] == ["completed", "completed"]
    data_events = [e for e in Queries(store).events(rows[0].id) if e.data is not None]
    assert len(data_events) == len(direct[0]) + 1  # + data: [DONE]
    assert data_events[-1].data == "[DONE]"
    assert [e.event for e in Queries(store).events(rows[1].id) if e.data is not None] == [
        e["type"] for e in direct[1]
    ]
    store.close()


def test_anthropic_sdk_messages_reverse_mode(
    sim: Simulator, ssetape_proc: Callable[..., Proc]
) -> None:
    def run(base: str) -> list[dict[str, Any]]:
        client = anthropic.Anthropic(base_url=base, api_key="sk-ant-x", max_retries=0)
        stream = client.messages.create(
            model="sim-thinking",
            max_tokens=64,
            stream=True,
            thinking={"type": "enabled", "budget_tokens": 32},
            messages=[{"role": "user", "content": "hello"}],
        )
        return [e.model_dump() for e in stream]

    direct = run(sim.url)
    proc = ssetape_proc("record", "--mode", f"reverse:{sim.url}")
    assert run(proc.url) == direct
    store = stop_and_open(proc)
    _, events = only(store)
    names = [e.event for e in events if e.data is not None]
    assert names[0] == "message_start" and names[-1] == "message_stop"
    assert "ping" in names
    assert [n for n in names if n != "ping"] == [e["type"] for e in direct]
    store.close()


def test_client_disconnect_upstream_cut_and_error_event_states(
    sim: Simulator, ssetape_proc: Callable[..., Proc]
) -> None:
    proc = ssetape_proc("record", "--mode", f"reverse:{sim.url}")
    # 1. the client walks away after the first chunk
    with (
        httpx.Client(timeout=30) as c,
        c.stream(
            "POST",
            proc.url + "/v1/chat/completions",
            content=orjson.dumps({**CHAT, "model": "sim-pause"}),
        ) as r,
    ):
        next(r.iter_raw())
    # 2. the upstream dies mid-stream
    with pytest.raises(httpx.RemoteProtocolError):
        raw_stream(proc.url, "/v1/chat/completions", {**CHAT, "model": "sim-cut"})
    # 3. an error event after the stream started (HTTP 200)
    assert raw_stream(proc.url, "/v1/chat/completions", {**CHAT, "model": "sim-error"})[0] == 200
    # the proxy keeps serving
    assert raw_stream(proc.url, "/v1/chat/completions", CHAT)[0] == 200

    store = stop_and_open(proc)
    rows = sorted(Queries(store).exchanges(), key=lambda x: x.id)
    assert [x.state for x in rows] == ["aborted", "truncated", "completed", "completed"]
    for x in rows[:3]:
        assert x.event_count == len(list(Queries(store).events(x.id))) > 0
    assert rows[0].error and rows[1].error
    errors = [e for e in Queries(store).events(rows[2].id) if e.data and '"error"' in e.data]
    assert errors, "the mid-stream error event is stored"
    store.close()


def test_an_unreachable_upstream_is_a_502_and_a_failed_exchange(
    ssetape_proc: Callable[..., Proc],
) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        upstream = f"http://127.0.0.1:{port}"
    proc = ssetape_proc("record", "--mode", f"reverse:{upstream}")
    r = httpx.post(proc.url + "/v1/chat/completions", content=orjson.dumps(CHAT), timeout=30)
    assert r.status_code == 502
    assert "Connect call failed" in r.text and str(port) in r.text  # mitmproxy's error page
    assert raw_stream(proc.url, "/v1/chat/completions", CHAT)[0] == 502  # and keeps serving
    store = stop_and_open(proc)
    rows = Queries(store).exchanges()
    assert [x.state for x in rows] == ["failed", "failed"]
    assert all(x.status is None and "Connect call failed" in (x.error or "") for x in rows)
    assert {x.outcome for x in rows} == {"no_response"}
    store.close()


def test_twenty_concurrent_streams_are_all_recorded(
    sim: Simulator, ssetape_proc: Callable[..., Proc]
) -> None:
    proc = ssetape_proc("record", "--mode", f"reverse:{sim.url}")
    results: dict[int, bytes] = {}

    def one(i: int) -> None:
        body = {**CHAT, "messages": [{"role": "user", "content": f"question {i}"}]}
        results[i] = raw_stream(proc.url, "/v1/chat/completions", body)[1]

    threads = [threading.Thread(target=one, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    store = stop_and_open(proc)
    rows = Queries(store).exchanges()
    assert len(rows) == 20
    got = {b"".join(e.raw for e in Queries(store).events(x.id)) for x in rows}
    assert got == set(results.values())
    assert {x.state for x in rows} == {"completed"}
    store.close()


@pytest.mark.parametrize("encoding", ["gzip", "br", "zstd"])
def test_a_compressed_stream_passes_as_sent_and_is_stored_event_by_event(
    sim: Simulator, ssetape_proc: Callable[..., Proc], encoding: str
) -> None:
    """What the SDKs ask for (``Accept-Encoding: gzip, deflate, br, zstd``), on every Python."""
    body = {**CHAT, "model": f"sim-{encoding}"}
    headers = {"accept-encoding": encoding}
    _, direct = raw_stream(sim.url, "/v1/chat/completions", body, headers=headers)
    proc = ssetape_proc("record", "--mode", f"reverse:{sim.url}")
    _, proxied = raw_stream(proc.url, "/v1/chat/completions", body, headers=headers)
    assert proxied == direct
    decoded = decode(direct, encoding, 1 << 20)
    sent = [e.raw for e in SseParser().feed(decoded)]
    store = stop_and_open(proc)
    x, events = only(store)
    assert b"".join(c.data for c in Queries(store).chunks(x.id)) == direct  # what replay sends
    assert [e.raw for e in events] == sent and events[-1].data == "[DONE]"
    assert x.error is None and x.event_count == len(sent) > 3
    store.close()
