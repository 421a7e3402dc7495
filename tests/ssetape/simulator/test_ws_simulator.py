"""The simulator's WebSocket side over real sockets: OpenAI Realtime and the Responses API's
WebSocket mode read by the official openai SDK, Gemini Live by google-genai over TLS (it
always dials wss://), and raw `websockets`/h11 clients for the handshake's details: the
frames, their deadlines, the close codes, a cut, and what the simulator keeps of a session."""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import h11
import openai
import orjson
import pytest
from openai.resources.responses import Responses
from pydantic import TypeAdapter
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from ssetape.simulator.simulator import Simulator
from ssetape.simulator.ws_gemini import GEMINI_CLOSE, GEMINI_PARTS, GEMINI_USAGE
from ssetape.simulator.ws_realtime import CLOSE_CODE, CLOSE_REASON, DELTAS, USAGE, RealtimePlan
from ssetape.simulator.ws_responses import RESPONSES_USAGE, SNAPSHOT, reply
from ssetape.simulator.ws_upgrade import ws_api
from ssetape.simulator.ws_wire import DELAY
from tests.conftest import self_signed

KEY = "sk-sim-websocket"
LATE = 0.06  # seconds a frame may come after its deadline on a loaded 2-core machine
GEMINI = "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent"


@pytest.fixture
def sim() -> Iterator[Simulator]:
    with Simulator(keep_sessions=True).serve_in_thread() as s:
        yield s


def ws_url(sim: Simulator, path: str) -> str:
    return sim.url.replace("http://", "ws://") + path


def oai(sim: Simulator) -> openai.OpenAI:
    return openai.OpenAI(base_url=sim.url + "/v1", api_key=KEY, max_retries=0)


def answered_at(sim: Simulator) -> list[float]:
    """When the last session's server frames went, in seconds from its last client frame."""
    session = sim.sessions[-1]
    asked = session.received[-1].at
    return [f.at - asked for f in session.sent if f.at >= asked]


def test_paths_the_sdks_dial() -> None:
    assert ws_api("/v1/realtime?model=gpt-realtime") == "realtime"
    assert ws_api("/v1/responses") == ws_api("/openai/v1/responses/") == "responses"
    assert ws_api(GEMINI) == ws_api(GEMINI.replace("v1beta", "v1") + "?key=k") == "gemini"
    assert ws_api(GEMINI + "Constrained") == "gemini"
    assert ws_api("/v1/chat/completions") is ws_api("/ws/live") is None


def test_a_realtime_response_through_the_openai_sdk(sim: Simulator) -> None:
    """session.created at once, then the response's frames at their deadlines from the
    response.create; every frame kept as sent and received, byte for byte."""
    with oai(sim).realtime.connect(model="gpt-realtime") as conn:
        heard = [conn.recv_bytes()]
        conn.response.create()
        while b'"response.done"' not in heard[-1]:
            heard.append(conn.recv_bytes())
    first, *events = [orjson.loads(h) for h in heard]
    assert (first["type"], first["session"]["model"]) == ("session.created", "gpt-realtime")
    assert [e["type"] for e in events] == [
        "response.created", *["response.output_text.delta"] * len(DELTAS), "response.done",
    ]  # fmt: skip
    assert [e["delta"] for e in events[1:-1]] == list(DELTAS)
    assert events[-1]["response"]["usage"] == USAGE
    assert len({e["event_id"] for e in [first, *events]}) == len(heard)

    (session,) = sim.sessions
    assert session.path == "/v1/realtime?model=gpt-realtime"
    assert session.headers["Authorization"] == f"Bearer {KEY}"  # the names as sent
    assert [f.payload for f in session.sent] == heard
    assert [orjson.loads(f.payload)["type"] for f in session.received] == ["response.create"]
    assert not any(f.binary for f in session.sent + session.received)
    # Deadlines from the response.create: response.created at once, delta i at (i+1) DELAY.
    due = [0.0, *(DELAY * (i + 1) for i in range(len(DELTAS))), DELAY * len(DELTAS)]
    for at, when in zip(answered_at(sim), due, strict=True):
        assert when <= at <= when + LATE, (at, when)


@pytest.mark.parametrize("model", ["close", "cut", "gpt-realtime-sim-cut", "error"])
def test_how_a_realtime_response_ends(sim: Simulator, model: str) -> None:
    """A close with a code and reason, or a TCP cut with no close frame, after two deltas;
    an ``error`` event after the deltas (the session goes on)."""
    got: list[str] = []
    ended = None
    with oai(sim).realtime.connect(model=model) as conn:
        conn.recv()
        conn.response.create()
        try:
            for event in conn:
                got.append(event.type)
                if event.type in ("response.done", "error"):
                    break
        except ConnectionClosed as e:
            ended = (e.rcvd.code, e.rcvd.reason) if e.rcvd else "no close frame"
    deltas = got.count("response.output_text.delta")
    if model == "error":
        assert (deltas, got[-1], ended) == (len(DELTAS), "error", None)
        return
    assert deltas == 2
    assert ended == ((CLOSE_CODE, CLOSE_REASON) if model == "close" else "no close frame")


def test_the_handshake_echoes_realtime_only_when_offered_and_declines_deflate(
    sim: Simulator,
) -> None:
    offered: Any = ["realtime", "openai-insecure-api-key.sk-browser"]
    with connect(ws_url(sim, "/v1/realtime?model=ok"), subprotocols=offered) as ws:
        assert ws.subprotocol == "realtime"
        assert "Sec-WebSocket-Extensions" not in ws.response.headers  # deflate was offered
        assert ws.response.headers["Server"] == "ssetape-simulator"
        assert orjson.loads(ws.recv(timeout=10))["type"] == "session.created"
    with connect(ws_url(sim, "/v1/realtime?model=ok")) as ws:
        assert ws.subprotocol is None
    assert "openai-insecure-api-key.sk-browser" in sim.sessions[0].headers["Sec-WebSocket-Protocol"]


def test_a_ping_and_a_close_are_answered_while_a_response_runs() -> None:
    slow = 0.2  # the first delta at 0.4 s: the ping and the close come well before it
    with Simulator(speed=slow, keep_sessions=True).serve_in_thread() as sim:
        with connect(ws_url(sim, "/v1/realtime?model=ok")) as ws:
            ws.recv(timeout=10)
            ws.send('{"type": "response.create"}')
            assert orjson.loads(ws.recv(timeout=10))["type"] == "response.created"
            assert ws.ping().wait(1.0)
            ws.close()
            rcvd = ws.protocol.close_rcvd  # the close went both ways
            assert rcvd is not None and rcvd.code == 1000
        time.sleep(DELAY / slow * 2)  # the response stopped: nothing went to a closed socket
    assert [orjson.loads(f.payload)["type"] for f in sim.sessions[0].sent] == [
        "session.created", "response.created",
    ]  # fmt: skip


def test_binary_frames_are_answered_in_binary(sim: Simulator) -> None:
    with connect(ws_url(sim, "/v1/realtime?model=ok")) as ws:
        ws.recv(timeout=10)
        ws.send(b'{"setup": {}}')
        assert ws.recv(timeout=10) == b'{"setupComplete":{}}'
        assert ws.recv(timeout=10) == b'{"serverContent":{"turnComplete":true}}'
    assert [f.binary for f in sim.sessions[0].sent] == [False, True, True]


def test_a_realtime_plan_times_each_response_and_speed_divides_it() -> None:
    """A bench's plan: the GA item frames around the deltas, every frame at its deadline
    from the response.create (``--speed`` 2: half of it)."""
    plan = RealtimePlan.jittered(("a", "b", "c"), first=0.2, gap=(0.02, 0.06), seed=7,
                                 created=0.05, done=0.03, items=True)  # fmt: skip
    with Simulator(speed=2.0, realtime=plan, keep_sessions=True).serve_in_thread() as sim:
        with connect(ws_url(sim, "/v1/realtime?model=gpt-realtime")) as ws:
            ws.recv(timeout=10)
            item = {"type": "message", "role": "user", "content": []}
            ws.send(orjson.dumps({"type": "conversation.item.create", "item": item}).decode())
            assert orjson.loads(ws.recv(timeout=10))["type"] == "conversation.item.added"
            ws.send('{"type": "response.create"}')
            kinds: list[str] = []
            while not kinds or kinds[-1] != "response.done":
                kinds.append(orjson.loads(ws.recv(timeout=10))["type"])
        at = answered_at(sim)
    assert kinds == [
        "response.created", "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.delta",
        "response.output_text.delta", "response.output_text.done",
        "response.content_part.done", "response.output_item.done", "conversation.item.done",
        "response.done",
    ]  # fmt: skip
    due = [plan.created] * 3 + list(plan.at) + [plan.at[-1]] * 4 + [plan.at[-1] + plan.done]
    for got, when in zip(at, due, strict=True):
        assert when / 2 <= got <= when / 2 + LATE, (got, when)


def test_a_frame_that_came_with_the_upgrade_request_on_a_kept_alive_connection(
    sim: Simulator,
) -> None:
    """h11 answers an HTTP request, then hands the connection over at the upgrade with what
    came after its head: the client's first frame, in the same packet."""
    conn = h11.Connection(h11.CLIENT)
    with socket.create_connection(("127.0.0.1", sim.port), timeout=10) as s:
        s.sendall(conn.send(h11.Request(method="GET", target="/v1/models",
                                        headers=[("Host", "sim")])) or b"")  # fmt: skip
        s.sendall(conn.send(h11.EndOfMessage()) or b"")
        assert _next(conn, s, h11.Response).status_code == 404  # not an API path
        _next(conn, s, h11.EndOfMessage)
        conn.start_next_cycle()
        upgrade = [("Host", "sim"), ("Upgrade", "websocket"), ("Connection", "Upgrade"),
                   ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
                   ("Sec-WebSocket-Version", "13")]  # fmt: skip
        head = conn.send(h11.Request(method="GET", target="/v1/responses", headers=upgrade))
        ask = {"type": "response.create", "model": "gpt-5-mini", "input": "packed"}
        s.sendall((head or b"") + (conn.send(h11.EndOfMessage()) or b"") + _masked(ask))
        switched = _next(conn, s, h11.InformationalResponse)
        assert switched.status_code == 101
        assert dict(switched.headers)[b"sec-websocket-accept"] == b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        frames = _frames(s, conn.trailing_data[0], until=b"response.completed")
    text = "".join(f["delta"] for f in frames if f["type"] == "response.output_text.delta")
    assert text == "".join(reply("packed"))


def test_an_upgrade_without_a_key_is_refused(sim: Simulator) -> None:
    conn = h11.Connection(h11.CLIENT)
    upgrade = [("Host", "sim"), ("Upgrade", "websocket"), ("Connection", "Upgrade")]
    with socket.create_connection(("127.0.0.1", sim.port), timeout=10) as s:
        head = conn.send(h11.Request(method="GET", target="/v1/realtime", headers=upgrade))
        s.sendall((head or b"") + (conn.send(h11.EndOfMessage()) or b""))
        assert _next(conn, s, h11.Response).status_code == 400
    assert sim.sessions == []


def test_an_upgrade_elsewhere_is_answered_as_http(sim: Simulator) -> None:
    with pytest.raises(InvalidStatus) as refused:
        connect(ws_url(sim, "/ws/live"), open_timeout=10)
    assert refused.value.response.status_code == 404
    assert sim.sessions == []


def test_sessions_are_kept_only_when_asked() -> None:
    with Simulator().serve_in_thread() as sim, connect(ws_url(sim, "/v1/realtime")) as ws:
        assert orjson.loads(ws.recv(timeout=10))["session"]["model"] == "ok"
    assert sim.sessions == []


NO_CONNECT = f"openai {openai.__version__} has no client.responses.connect()"


@pytest.mark.skipif(not hasattr(Responses, "connect"), reason=NO_CONNECT)
def test_responses_websocket_mode_through_the_openai_sdk(sim: Simulator) -> None:
    """Two chained responses on one socket, every event the SDK's own type; a previous id
    the socket never produced is refused; a missing model too."""
    from openai.types.responses.responses_server_event import ResponsesServerEvent

    adapter: TypeAdapter[Any] = TypeAdapter(ResponsesServerEvent)
    got: list[list[Any]] = []
    with oai(sim).responses.connect() as conn:
        for text in ("first", "second"):
            chained = {"previous_response_id": got[-1][-1].response.id} if got else {}
            conn.response.create(model="gpt-5-mini", input=text, store=False, **chained)
            got.append([])
            for event in conn:
                got[-1].append(event)
                if event.type == "response.completed":
                    break
        conn.response.create(model="gpt-5-mini", input="x", previous_response_id="resp_nope")
        refused = conn.recv()
        conn.response.create(model="gpt-missing", input="x")
        missing = conn.recv()
    for text, events in zip(("first", "second"), got, strict=True):
        deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
        assert deltas == list(reply(text))
        assert [e.sequence_number for e in events] == list(range(len(events)))
        last = events[-1].response
        assert (last.model, last.usage.total_tokens) == (
            "gpt-5-mini" + SNAPSHOT, RESPONSES_USAGE["total_tokens"],
        )  # fmt: skip
    assert got[1][-1].response.previous_response_id == got[0][-1].response.id
    assert refused.type == missing.type == "error"
    session = sim.sessions[0]
    errors = [orjson.loads(f.payload) for f in session.sent[-2:]]
    assert [e["error"]["code"] for e in errors] == [
        "previous_response_not_found", "model_not_found",
    ]  # fmt: skip
    for frame in session.sent[:-2]:
        adapter.validate_python(orjson.loads(frame.payload))
    # Each delta at its deadline from the response.create that asked for it.
    asked = session.received[0].at
    deltas = [f.at - asked for f in session.sent if b"output_text.delta" in f.payload][:4]
    for i, at in enumerate(deltas):
        assert DELAY * (i + 1) <= at <= DELAY * (i + 1) + LATE, (i, at)


@pytest.mark.parametrize("model", ["close", "cut"])
def test_a_responses_socket_closed_or_cut_mid_lane(sim: Simulator, model: str) -> None:
    """Two lanes at once (``stream_id``): their events interleave; the one that asks for a
    close or a cut ends the socket for both."""
    with connect(ws_url(sim, "/v1/responses")) as ws:
        for lane, asked in (("a", "gpt-5-mini"), ("b", model)):
            ws.send(orjson.dumps({"type": "response.create", "model": asked, "input": lane,
                                  "stream_id": lane}).decode())  # fmt: skip
        lanes: list[str] = []
        with pytest.raises(ConnectionClosed) as ended:
            while True:
                lanes.append(orjson.loads(ws.recv(timeout=10))["stream_id"])
    assert lanes[:2] == ["a", "a"] and "b" in lanes[2:6]  # interleaved from the start
    rcvd = ended.value.rcvd
    if model == "close":
        assert rcvd is not None and (rcvd.code, rcvd.reason) == (CLOSE_CODE, CLOSE_REASON)
    else:
        assert rcvd is None  # no close frame


def test_gemini_live_through_google_genai_over_tls(tmp_path: Path) -> None:
    """google-genai dials wss://: the simulator's TLS serves the upgrade on its port. Every
    server message is JSON in a binary frame, as the SDK's ``LiveServerMessage`` validates
    it; a refused model is a close code with a reason."""
    genai = pytest.importorskip("google.genai")
    types = pytest.importorskip("google.genai.types")
    errors = pytest.importorskip("google.genai.errors")
    cert, key = self_signed(tmp_path)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)
    with Simulator(ssl=tls, keep_sessions=True).serve_in_thread() as sim:
        with pytest.MonkeyPatch.context() as env:  # read when the client is made
            env.setenv("SSL_CERT_FILE", str(cert))
            options = types.HttpOptions(base_url=sim.url)
            client = genai.Client(api_key="AIza-sim", http_options=options)
        config = types.LiveConnectConfig(response_modalities=[types.Modality.TEXT])

        async def turn(model: str) -> list[Any]:
            async with client.aio.live.connect(model=model, config=config) as live:
                hi = types.Content(role="user", parts=[types.Part(text="Salut")])
                await live.send_client_content(turns=hi, turn_complete=True)
                return [m async for m in live.receive()]

        got = asyncio.run(turn("gemini-live-2.5-flash"))
        with pytest.raises(errors.APIError) as refused:
            asyncio.run(turn("gemini-close"))
    assert "".join(m.text or "" for m in got) == "".join(GEMINI_PARTS)
    assert got[-1].usage_metadata.total_token_count == GEMINI_USAGE["totalTokenCount"]
    assert refused.value.code == GEMINI_CLOSE[0] and GEMINI_CLOSE[1] in str(refused.value)
    session = sim.sessions[0]
    assert "BidiGenerateContent" in session.path and session.headers["x-goog-api-key"]
    assert all(f.binary for f in session.sent) and len(session.sent) == len(GEMINI_PARTS) + 3
    for frame in session.sent:
        types.LiveServerMessage.model_validate(orjson.loads(frame.payload))
    asked = session.received[-1].at
    parts = [f.at - asked for f in session.sent[1 : 1 + len(GEMINI_PARTS)]]
    for i, at in enumerate(parts):
        assert DELAY * (i + 1) <= at <= DELAY * (i + 1) + LATE, (i, at)


def _next(conn: h11.Connection, s: socket.socket, kind: type[Any]) -> Any:
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(s.recv(65536))
        elif isinstance(event, kind):
            return event


def _masked(obj: object) -> bytes:
    """A client's text frame (masked, as RFC 6455 wants a client's)."""
    payload, mask = orjson.dumps(obj), b"\x01\x02\x03\x04"
    assert len(payload) < 126
    body = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return struct.pack("!BB", 0x81, 0x80 | len(payload)) + mask + body


def _frames(s: socket.socket, buf: bytes, until: bytes) -> list[dict[str, Any]]:
    """The server's text frames (unmasked, under 64 KiB) up to the one holding ``until``."""
    out: list[dict[str, Any]] = []
    while not out or until not in orjson.dumps(out[-1]):
        while len(buf) < 4 or len(buf) < _size(buf):
            buf += s.recv(65536)
        n = _size(buf)
        out.append(orjson.loads(buf[4 if buf[1] == 126 else 2 : n]))
        buf = buf[n:]
    return out


def _size(buf: bytes) -> int:
    n = buf[1] & 0x7F
    return 4 + struct.unpack("!H", buf[2:4])[0] if n == 126 else 2 + n
