"""`--fault` on WebSocket sessions, replayed by ssetape's own replay server from a real store
to the `websockets` library's client (the one under the openai and google-genai SDKs): a cut
is an abnormal closure after N server frames or T ms, a stall holds the rest of an answer
back, an error is each API's own (an `error` event for OpenAI's, a close 1011 for Gemini
Live), `times=` limits a fault to the first sessions, and a status refuses the handshake."""

from __future__ import annotations

import time

import orjson
import pytest
from openai.types.realtime import RealtimeErrorEvent
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from ssetape.replay.provider_errors import GOOGLE_FAILURE
from ssetape.storage.store import Store
from tests.ssetape.replay.ws_tapes import (
    ANSWER,
    ANSWER_MS,
    ASK,
    GEMINI,
    MARGIN,
    REALTIME,
    Frame,
    realtime_frames,
    record,
    serving,
    timed,
)

URL = REALTIME + "?model=m"


def closed_after(ws: ClientConnection, since: float) -> tuple[float, ConnectionClosed]:
    """Seconds after ``since`` when the connection ended, and how (nothing else came)."""
    with pytest.raises(ConnectionClosed) as closed:
        got = ws.recv(timeout=10)
        pytest.fail(f"a frame came after the fault: {got!r}")
    return time.monotonic() - since, closed.value


def test_cut_after_n_events_drops_the_connection_right_after_the_nth_server_frame(
    store: Store,
) -> None:
    """Events are server frames: session.created and two of the answer, then TCP closes
    with no close frame (1006), as an upstream that crashed there."""
    record(store, "a" * 32, realtime_frames())
    with serving(store, faults=["cut:event=3"]) as url, connect(url + URL) as ws:
        assert ws.recv(timeout=10) == realtime_frames()[0][2]
        asked = time.monotonic()
        ws.send(ASK)
        assert [m for _, m in timed(ws, 2, asked)] == list(ANSWER[:2])
        at, closed = closed_after(ws, asked)
    assert closed.rcvd is None and ws.close_code == 1006  # no close frame came
    assert at <= ANSWER_MS[1] / 1000 + MARGIN  # right after the last frame, not later


def test_cut_after_ms_drops_the_connection_then_whatever_the_recording_does(
    store: Store,
) -> None:
    """300 ms after the upgrade request: what was due by then came, the rest never does,
    though the recording went on (and ended with the client's close)."""
    frames: list[Frame] = [
        (5, "server", '{"type":"session.created"}'),
        (30, "client", ASK),
        (31, "server", ANSWER[0]),
        (130, "server", ANSWER[1]),
        (630, "server", ANSWER[2]),
        (730, "server", ANSWER[3]),
    ]
    record(store, "a" * 32, frames)
    with serving(store, faults=["cut:ms=300"]) as url:
        start = time.monotonic()
        with connect(url + URL) as ws:
            ws.recv(timeout=10)
            ws.send(ASK)
            assert [ws.recv(timeout=10) for _ in range(2)] == list(ANSWER[:2])
            at, closed = closed_after(ws, start)
    assert closed.rcvd is None and ws.close_code == 1006
    assert 0.3 - 0.005 <= at <= 0.3 + MARGIN, at


def test_a_stall_holds_the_rest_of_the_answer_back_not_the_next_answer(store: Store) -> None:
    """stall:event=2,ms=500: the answer's frames after its response.created come 0.5 s late;
    the answer to the next response.create keeps its recorded delay from it (the client
    sent it late already: it is not held twice)."""
    frames = [*realtime_frames(), (400, "client", ASK), (401, "server", ANSWER[0]),
              (481, "server", ANSWER[3])]  # fmt: skip
    record(store, "a" * 32, frames)
    with serving(store, faults=["stall:event=2,ms=500"]) as url, connect(url + URL) as ws:
        ws.recv(timeout=10)
        asked = time.monotonic()
        ws.send(ASK)
        first = timed(ws, len(ANSWER), asked)
        asked_again = time.monotonic()
        ws.send(ASK)
        second = timed(ws, 2, asked_again)
    assert [m for _, m in first] == list(ANSWER)
    held = [ANSWER_MS[0], *(ms + 500 for ms in ANSWER_MS[1:])]
    for (at, _), ms in zip(first, held, strict=True):
        assert ms / 1000 - 0.005 <= at <= ms / 1000 + MARGIN, (ms, at)
    assert [m for _, m in second] == [ANSWER[0], ANSWER[3]]
    assert second[-1][0] <= 0.081 + MARGIN, second


def test_a_realtime_error_is_a_server_error_event_and_the_session_stays_open(
    store: Store,
) -> None:
    """Where the answer's first delta would have come, the Realtime API's own `error` event
    (what the openai SDK parses as RealtimeErrorEvent); nothing more comes, the session
    stays open and the client closes it as it would."""
    record(store, "a" * 32, realtime_frames())
    with serving(store, faults=["error:event=2"]) as url, connect(url + URL) as ws:
        ws.recv(timeout=10)
        asked = time.monotonic()
        ws.send(ASK)
        (_, created), (at, data) = timed(ws, 2, asked)
        with pytest.raises(TimeoutError):
            ws.recv(timeout=0.5)
        ws.close(1000, "bye")
    assert created == ANSWER[0]
    event = RealtimeErrorEvent.model_validate_json(data)
    assert event.type == "error" and event.error.type == "server_error"
    assert ANSWER_MS[1] / 1000 - 0.005 <= at <= ANSWER_MS[1] / 1000 + MARGIN, at
    assert ws.close_code == 1000  # closed by the client, cleanly


def test_a_responses_error_follows_the_stream_it_replaces(store: Store) -> None:
    """Responses WebSocket mode: the error event takes the replaced event's sequence_number
    and stream_id, as an error emitted by that response stream would."""

    def ev(kind: str, n: int) -> str:
        return orjson.dumps({"type": kind, "stream_id": "a", "sequence_number": n}).decode()

    ask = '{"type":"response.create","stream_id":"a","model":"m"}'
    frames: list[Frame] = [(10, "client", ask), (20, "server", ev("response.created", 0)),
                           (100, "server", ev("response.output_text.delta", 1)),
                           (180, "server", ev("response.output_text.delta", 2)),
                           (200, "server", ev("response.completed", 3))]  # fmt: skip
    record(store, "a" * 32, frames, path="/v1/responses", query="")
    with serving(store, faults=["error:event=2"]) as url, connect(url + "/v1/responses") as ws:
        ws.send(ask)
        got = [orjson.loads(ws.recv(timeout=10)) for _ in range(3)]
    assert [g["type"] for g in got] == ["response.created", "response.output_text.delta", "error"]
    error = got[2]
    assert (error["sequence_number"], error["stream_id"]) == (2, "a")
    assert error["error"]["type"] == "server_error" and error["error"]["message"]


def test_a_gemini_error_is_a_close_1011_with_googles_reason(store: Store) -> None:
    frames: list[Frame] = [
        (10, "client", b'{"setup":{"model":"models/gemini-live"}}'),
        (40, "server", b'{"setupComplete":{}}'),
        (100, "client", b'{"clientContent":{"turnComplete":true}}'),
        (180, "server", b'{"serverContent":{"modelTurn":{"parts":[{"text":"Bon"}]}}}'),
        (260, "server", b'{"serverContent":{"modelTurn":{"parts":[{"text":"jour"}]}}}'),
        (300, "server", b'{"serverContent":{"turnComplete":true}}'),
    ]
    record(store, "a" * 32, frames, path=GEMINI, query="")
    with serving(store, faults=["error:event=2"]) as url, connect(url + GEMINI) as ws:
        ws.send(frames[0][2])
        assert ws.recv(timeout=10) == frames[1][2]
        asked = time.monotonic()
        ws.send(frames[2][2])
        assert ws.recv(timeout=10) == frames[3][2]
        at, closed = closed_after(ws, asked)
    assert closed.rcvd is not None
    assert (closed.rcvd.code, closed.rcvd.reason) == (1011, GOOGLE_FAILURE)
    assert 0.16 - 0.005 <= at <= 0.16 + MARGIN, at  # when the second part would have come


def test_times_limits_a_fault_to_the_first_sessions(store: Store) -> None:
    record(store, "a" * 32, realtime_frames())
    with serving(store, faults=["cut:event=1,times=1"]) as url:
        with connect(url + URL) as ws:
            assert ws.recv(timeout=10) == realtime_frames()[0][2]
            _, closed = closed_after(ws, time.monotonic())
        assert closed.rcvd is None
        with connect(url + URL) as ws:  # the second session plays whole
            ws.recv(timeout=10)
            ws.send(ASK)
            assert [ws.recv(timeout=10) for _ in ANSWER] == list(ANSWER)


def test_a_status_fault_refuses_the_handshake_then_the_retry_plays(store: Store) -> None:
    record(store, "a" * 32, realtime_frames())
    with serving(store, faults=["status:429,retry_after=1,times=1"]) as url:
        with pytest.raises(InvalidStatus) as refused:
            connect(url + URL)
        with connect(url + URL) as ws:
            assert ws.recv(timeout=10) == realtime_frames()[0][2]
    response = refused.value.response
    assert response.status_code == 429 and response.headers["retry-after"] == "1"
    assert orjson.loads(response.body or b"{}")["error"]["code"] == "rate_limit_exceeded"
