"""WebSocket sessions through `ssetape record` (reverse mode), with the official openai SDK's
Realtime client against a fake upstream that answers as the Realtime API does: one exchange
per session, every message an event with its sender, opcode, exact payload and offset, and
the session's end as its outcome."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import openai
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from ssetape.simulator.simulator import Simulator
from ssetape.simulator.ws_realtime import CLOSE_CODE, CLOSE_REASON, DELTAS
from ssetape.simulator.ws_wire import DELAY
from ssetape.storage.models import Event, Exchange
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from tests.conftest import Proc

KEY = "sk-proj-SECRETrealtimeKEY0123456789"


@pytest.fixture
def realtime() -> Iterator[tuple[Simulator, str]]:
    with Simulator(keep_sessions=True).serve_in_thread() as upstream:
        url = upstream.url
        yield upstream, url


def stored(proc: Proc) -> tuple[Exchange, list[Event]]:
    assert proc.stop() == 0
    store = Store.open(proc.db, create=False)
    try:
        q = Queries(store)
        (x,) = q.exchanges(limit=10)
        return x, list(q.events(x.id))
    finally:
        store.close()


def one_response(model: str, proc: Proc) -> list[str]:
    """A Realtime session through ``proc``: one response.create; the event types received."""
    client = openai.OpenAI(base_url=proc.url + "/v1", api_key=KEY, max_retries=0)
    got: list[str] = []
    with client.realtime.connect(model=model) as conn:
        got.append(conn.recv().type)
        conn.response.create()
        try:
            for event in conn:
                got.append(event.type)
                if event.type in ("response.done", "error"):
                    break
        except ConnectionClosed as e:
            got.append(f"closed {e.rcvd.code if e.rcvd else None}")
    return got


def assert_messages_as_sent(events: list[Event], upstream: Simulator) -> None:
    """Every stored message is one the fake sent or got, in order, byte for byte."""
    (session,) = upstream.sessions
    server = [e for e in events if e.direction == "server"]
    client = [e for e in events if e.direction == "client"]
    assert [e.raw for e in server] == [f.payload for f in session.sent]
    assert [e.raw for e in client] == [f.payload for f in session.received]
    assert {e.opcode for e in events} == {"text"}
    assert [e.seq for e in events] == list(range(len(events)))
    offsets = [e.offset_us for e in events]
    assert offsets == sorted(offsets) and offsets[0] >= 0
    # The deltas' spacing is the fake's, within wide margins (a busy machine).
    deltas = [e.offset_us for e in server if e.event == "response.output_text.delta"]
    for a, b in itertools.pairwise(deltas):
        assert DELAY * 0.5e6 < b - a < DELAY * 1e6 + 150_000


def test_realtime_session_recorded_message_by_message(
    realtime: tuple[Simulator, str], ssetape_proc: Callable[..., Proc]
) -> None:
    upstream, url = realtime
    proc = ssetape_proc("record", "--mode", f"reverse:{url}")
    got = one_response("ok", proc)
    assert got[0] == "session.created" and got[-1] == "response.done"
    x, events = stored(proc)
    assert (x.status, x.transport, x.state, x.path) == (
        101,
        "websocket",
        "completed",
        "/v1/realtime",
    )
    assert x.query == "model=ok"
    assert_messages_as_sent(events, upstream)
    # session.created, response.create, response.created, the deltas, response.done.
    assert len(events) == 4 + len(DELTAS)
    assert [e.event for e in events[:3]] == [
        "session.created",
        "response.create",
        "response.created",
    ]
    assert x.event_count == len(events)
    assert x.outcome == "completed" and x.fault is None
    headers = {k.lower(): v for k, v in x.request_headers}
    assert headers["authorization"].startswith("Bearer <redacted:")


def test_server_close_with_a_code_is_an_error_outcome(
    realtime: tuple[Simulator, str], ssetape_proc: Callable[..., Proc]
) -> None:
    upstream, url = realtime
    proc = ssetape_proc("record", "--mode", f"reverse:{url}")
    got = one_response("close", proc)
    assert got[-1] == f"closed {CLOSE_CODE}"
    x, events = stored(proc)
    assert_messages_as_sent(events, upstream)
    assert x.state == "completed"
    assert x.error == f"the server closed the WebSocket session: {CLOSE_CODE} {CLOSE_REASON}"


def test_upstream_cut_is_recorded_as_a_cut(
    realtime: tuple[Simulator, str], ssetape_proc: Callable[..., Proc]
) -> None:
    upstream, url = realtime
    proc = ssetape_proc("record", "--mode", f"reverse:{url}")
    one_response("cut", proc)
    x, events = stored(proc)
    assert_messages_as_sent(events, upstream)
    assert (x.state, x.outcome, x.fault) == ("truncated", "cut", "provider")
    assert "without a WebSocket close frame" in (x.error or "")


def test_binary_frames_are_stored_as_binary(
    realtime: tuple[Simulator, str], ssetape_proc: Callable[..., Proc]
) -> None:
    """Gemini Live's way: JSON in binary frames, both ways."""
    upstream, url = realtime
    proc = ssetape_proc("record", "--mode", f"reverse:{url}")
    ws_url = proc.url.replace("http://", "ws://") + "/v1/realtime?model=ok"
    with connect(ws_url) as ws:
        ws.recv(timeout=10)
        ws.send(b'{"setup": {"model": "models/gemini-live"}}')
        assert ws.recv(timeout=10) == b'{"setupComplete":{}}'
        ws.recv(timeout=10)
    _, events = stored(proc)
    (session,) = upstream.sessions
    assert [(e.direction, e.opcode, e.event) for e in events] == [
        ("server", "text", "session.created"),
        ("client", "binary", "setup"),
        ("server", "binary", "setupComplete"),
        ("server", "binary", "serverContent"),
    ]
    assert [e.raw for e in events if e.direction == "server"] == [f.payload for f in session.sent]
    assert events[2].data == '{"setupComplete":{}}'
