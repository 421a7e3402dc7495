"""The Responses API's WebSocket mode through `ssetape record`, with the official openai SDK's
``client.responses.connect()`` against a fake upstream that answers as the API does (its
frames validate as the SDK's own server events): one exchange per socket, every frame an event
stored byte for byte, and the session's knowledge (model, usage, outcome, TTFT per response)
as the recorder saved it and as `ssetape reindex` finds it again. Reverse mode, and forward
mode through ``HTTPS_PROXY`` with the CA of `ssetape ca`."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest
from openai.resources.responses import Responses
from pydantic import TypeAdapter
from websockets.exceptions import ConnectionClosed

from ssetape.analysis.sessions import CUT
from ssetape.simulator.simulator import Simulator
from ssetape.simulator.ws_realtime import CLOSE_CODE, CLOSE_REASON
from ssetape.simulator.ws_responses import RESPONSES_USAGE, SNAPSHOT, reply
from ssetape.simulator.ws_wire import DELAY, Session
from ssetape.storage.models import Event
from tests.addons.test_websocket_knowledge import knowledge, within
from tests.addons.test_websocket_record import KEY, stored
from tests.conftest import Proc, self_signed

NO_CONNECT = f"openai {openai.__version__} has no client.responses.connect() (WebSocket mode)"
pytestmark = pytest.mark.skipif(not hasattr(Responses, "connect"), reason=NO_CONNECT)
responses_server_event = pytest.importorskip(
    "openai.types.responses.responses_server_event", reason=NO_CONNECT
)
ENDS = ("response.completed", "response.failed", "response.incomplete", "error")
MODEL = "gpt-5-mini"
# A response's frames: created, in_progress, item and part added, the deltas, text, part and
# item done, completed.
FRAMES = 8 + len(reply("x"))
# openai 2.x types only the flat error of the HTTP stream; 3.x the WebSocket one too.
WS_ERRORS = hasattr(responses_server_event, "ResponseWsError")


@pytest.fixture
def upstream() -> Iterator[tuple[Simulator, str]]:
    with Simulator(keep_sessions=True).serve_in_thread() as fake:
        url = fake.url
        yield fake, url


def read_to_end(conn: Any, events: list[Any], ends: int = 1) -> None:
    """Events into ``events`` until ``ends`` terminals came; a closed socket adds
    ``closed <code>`` (a clean close ends the SDK's iteration without one)."""
    try:
        for event in conn:
            events.append(event)
            ends -= event.type in ENDS
            if not ends:
                return
    except ConnectionClosed as e:
        events.append(f"closed {e.rcvd.code if e.rcvd else None}")


def converse(proc: Proc, inputs: list[str], model: str = MODEL) -> list[list[Any]]:
    """One socket through ``proc``: a ``response.create`` for each input, each but the first
    continuing the one before (``previous_response_id``) after a second of thought, read to
    its terminal; the events the SDK parsed, per response."""
    client = openai.OpenAI(base_url=proc.url + "/v1", api_key=KEY, max_retries=0)
    got: list[list[Any]] = []
    with client.responses.connect() as conn:
        for text in inputs:
            chained: dict[str, Any] = {}
            if got:
                time.sleep(1.0)  # the user thinks
                chained["previous_response_id"] = got[-1][-1].response.id
            conn.response.create(model=model, input=text, store=False, **chained)
            got.append([])
            read_to_end(conn, got[-1])
    return got


def text_of(events: list[Any]) -> str:
    deltas = [e for e in events if getattr(e, "type", "") == "response.output_text.delta"]
    return "".join(e.delta for e in deltas)


def assert_stored_as_sent(events: list[Event], session: Session) -> None:
    """Every frame of the socket is one stored event, in order, byte for byte, and every frame
    the fake sent is one the SDK types as a server event of this API."""
    server = [e for e in events if e.direction == "server"]
    client = [e for e in events if e.direction == "client"]
    assert [e.raw for e in server] == [f.payload for f in session.sent]
    assert [e.raw for e in client] == [f.payload for f in session.received]
    assert {e.opcode for e in events} == {"text"}
    assert [e.seq for e in events] == list(range(len(events)))
    assert [e.event for e in events] == [orjson.loads(e.raw or b"")["type"] for e in events]
    adapter: TypeAdapter[Any] = TypeAdapter(responses_server_event.ResponsesServerEvent)
    for frame in session.sent:
        obj = orjson.loads(frame.payload)
        if obj["type"] != "error" or WS_ERRORS:
            adapter.validate_python(obj)


def test_responses_websocket_session_recorded(
    upstream: tuple[Simulator, str], ssetape_proc: Callable[..., Proc]
) -> None:
    """Two responses on one socket, the second continuing the first after the user thought
    for a second: one exchange, both responses in its knowledge."""
    fake, url = upstream
    proc = ssetape_proc("record", "--mode", f"reverse:{url}")
    got = converse(proc, ["first", "second"])
    assert [text_of(r) for r in got] == ["".join(reply("first")), "".join(reply("second"))]
    assert [r[-1].type for r in got] == ["response.completed"] * 2
    assert got[1][-1].response.previous_response_id == got[0][-1].response.id

    x, codes = knowledge(proc)
    assert (x.status, x.transport, x.path, x.state) == (
        101, "websocket", "/v1/responses", "completed",
    )  # fmt: skip
    assert (x.api, x.model, x.outcome, x.fault) == (
        "responses", MODEL + SNAPSHOT, "completed", None,
    )  # fmt: skip
    u: dict[str, Any] = RESPONSES_USAGE
    assert (x.input_tokens, x.output_tokens, x.total_tokens, x.cache_read_tokens) == (
        2 * u["input_tokens"], 2 * u["output_tokens"], 2 * u["total_tokens"],
        2 * u["input_tokens_details"]["cached_tokens"],
    )  # fmt: skip
    # One response a line, as `show`, the web page and MCP print the session's text.
    assert x.output_text == "".join(reply("first")) + "\n" + "".join(reply("second"))
    session = (x.details or {})["session"]
    assert session["responses"] == 2
    assert len(session["ttft_us"]) == 2 and all(within(t, DELAY) for t in session["ttft_us"])
    # Gaps are the deltas' spacing, never the second of thought between two responses.
    assert within(x.gap_max_us, DELAY)
    assert codes == []

    _, events = stored(proc)
    (sock,) = fake.sessions
    assert_stored_as_sent(events, sock)
    assert len(events) == 2 * (1 + FRAMES) and x.event_count == len(events)
    assert [e.event for e in events if e.direction == "client"] == ["response.create"] * 2
    headers = {k.lower(): v for k, v in x.request_headers}
    assert headers["authorization"].startswith("Bearer <redacted:")
    assert KEY.encode() not in Path(proc.db).read_bytes()


def test_lanes_of_one_socket_are_read_apart(
    upstream: tuple[Simulator, str], ssetape_proc: Callable[..., Proc]
) -> None:
    """Two responses at once, each in its lane (``stream_id``): their events interleave on
    the socket, yet each response's text, TTFT and gaps are its own."""
    fake, url = upstream
    proc = ssetape_proc("record", "--mode", f"reverse:{url}")
    client = openai.OpenAI(base_url=proc.url + "/v1", api_key=KEY, max_retries=0)
    events: list[Any] = []
    with client.responses.connect() as conn:
        for lane in ("alpha", "beta"):
            ask = {"type": "response.create", "model": MODEL, "input": lane, "stream_id": lane}
            conn.send(ask)  # type: ignore[arg-type]  # stream_id: typed from openai 3.x on
        read_to_end(conn, events, ends=2)
    for lane in ("alpha", "beta"):
        mine = [e for e in events if getattr(e, "stream_id", None) == lane]
        assert len(mine) == FRAMES and text_of(mine) == "".join(reply(lane))

    x, _ = knowledge(proc)
    _, stored_events = stored(proc)
    assert_stored_as_sent(stored_events, fake.sessions[0])
    # The lanes ran at once: beta's first delta came before alpha's response completed.
    kinds = [(e.event, orjson.loads(e.raw or b"").get("stream_id")) for e in stored_events]
    assert kinds.index(("response.output_text.delta", "beta")) < kinds.index(
        ("response.completed", "alpha")
    )
    assert (x.api, x.outcome, x.model) == ("responses", "completed", MODEL + SNAPSHOT)
    whole = ["".join(reply(lane)) for lane in ("alpha", "beta")]
    assert x.output_text in (f"{whole[0]}\n{whole[1]}", f"{whole[1]}\n{whole[0]}")  # as ended
    ttfts = (x.details or {})["session"]["ttft_us"]
    assert len(ttfts) == 2 and all(within(t, DELAY) for t in ttfts)
    # Within a lane, deltas are DELAY apart; across lanes they are a moment apart.
    assert within(x.gap_median_us, DELAY)
    assert x.total_tokens == 2 * RESPONSES_USAGE["total_tokens"]  # type: ignore[operator]


@pytest.mark.parametrize(
    ("model", "outcome", "reason", "text"),
    [
        ("gpt-missing", "error", "model_not_found", ""),
        ("fail", "error", "server_error", "".join(reply("x")[:2])),
        ("close", "error", f"{CLOSE_CODE} {CLOSE_REASON}", "".join(reply("x")[:2])),
        ("cut", "cut", CUT, "".join(reply("x")[:2])),
    ],
)
def test_how_a_responses_socket_ended(
    model: str, outcome: str, reason: str, text: str,
    upstream: tuple[Simulator, str], ssetape_proc: Callable[..., Proc],
) -> None:  # fmt: skip
    """A create refused, a response failed, a socket closed with a code, a socket cut: the
    outcome says which, and what arrived before the end is kept."""
    fake, url = upstream
    proc = ssetape_proc("record", "--mode", f"reverse:{url}")
    (got,) = converse(proc, ["x"], model=model)
    if model in ("gpt-missing", "fail"):
        assert got[-1].type == ("error" if model == "gpt-missing" else "response.failed")
    if model == "close":
        assert got[-1] == f"closed {CLOSE_CODE}"
    x, codes = knowledge(proc)
    assert (x.api, x.outcome, x.outcome_reason, x.fault) == ("responses", outcome, reason,
                                                             "provider")  # fmt: skip
    # The served model once a response began, else the one asked for.
    assert x.model == (model if model == "gpt-missing" else model + SNAPSHOT)
    assert x.output_text == text
    assert ("server_error" in codes) == (outcome == "error" and model != "close")
    _, events = stored(proc)
    assert_stored_as_sent(events, fake.sessions[0])


CLIENT = """
import json, sys, openai
client = openai.OpenAI(base_url=sys.argv[1], api_key=sys.argv[2], max_retries=0)
out = []
with client.responses.connect() as conn:
    conn.response.create(model=sys.argv[3], input="forward", store=False)
    for event in conn:
        out.append(event.type)
        if event.type == "response.completed":
            break
print(json.dumps(out))
"""


def test_responses_websocket_recorded_through_forward_https(
    ssetape_proc: Callable[..., Proc], tmp_path: Path, confdir: Path
) -> None:
    """The SDK as a user runs it behind the proxy: ``HTTPS_PROXY`` (websockets tunnels with
    CONNECT) and ``SSL_CERT_FILE`` the CA of `ssetape ca`, to a TLS upstream."""
    cert, key = self_signed(tmp_path)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)
    with Simulator(keep_sessions=True, ssl=tls).serve_in_thread() as fake:
        url = fake.url
        base = url.replace("127.0.0.1", "localhost") + "/v1"
        rec = ssetape_proc("record", "--set", f"ssl_verify_upstream_trusted_ca={cert}")
        ca = str(confdir / "mitmproxy-ca-cert.pem")
        env = {**os.environ, "HTTPS_PROXY": rec.url, "SSL_CERT_FILE": ca,
               "NO_PROXY": "", "no_proxy": ""}  # fmt: skip
        run = subprocess.run([sys.executable, "-c", CLIENT, base, KEY, MODEL], env=env,
                             capture_output=True, timeout=120)  # fmt: skip
        assert run.returncode == 0, run.stderr.decode()
        assert orjson.loads(run.stdout)[-1] == "response.completed"
        x, codes = knowledge(rec)
    assert (x.scheme, x.host, x.path, x.transport) == ("https", "localhost", "/v1/responses",
                                                       "websocket")  # fmt: skip
    assert (x.api, x.model, x.outcome, x.output_text) == (
        "responses", MODEL + SNAPSHOT, "completed", "".join(reply("forward")),
    )  # fmt: skip
    assert x.total_tokens == RESPONSES_USAGE["total_tokens"] and codes == []
    assert within(x.ttft_us, DELAY)
    _, events = stored(rec)
    assert_stored_as_sent(events, fake.sessions[0])
    assert KEY.encode() not in Path(rec.db).read_bytes()
