"""WebSocket sessions replayed by ssetape's own replay server (the direct front, in process),
from a real SQLite store written by the real writer, to the `websockets` library's client (the
one under the openai and google-genai SDKs): the handshake, each server frame byte for byte at
its recorded delay from the client frame it answers, misses, and the recorded ends."""

from __future__ import annotations

import logging
import threading
import time

import orjson
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect
from websockets.typing import Subprotocol
from wsproto.frame_protocol import FrameProtocol, Opcode

from ssetape.framing.websocket import BINARY, TEXT, frame
from ssetape.storage.store import Store
from tests.ssetape.replay.ws_tapes import (
    ANSWER,
    ANSWER_MS,
    ASK,
    ASKED_MS,
    GEMINI,
    MARGIN,
    REALTIME,
    Frame,
    realtime_frames,
    record,
    serving,
    timed,
)


def test_the_101_is_made_for_the_clients_key_without_deflate_and_with_the_recorded_subprotocol(
    store: Store,
) -> None:
    """The old replay sent the recorded Sec-WebSocket-Accept with no Upgrade: every client
    refused it. Deflate, which `websockets` offers by default, is declined; the subprotocol
    is the recorded one when offered, and a key token is never echoed."""
    record(store, "a" * 32, realtime_frames(), headers=[
        ("Sec-WebSocket-Protocol", "realtime"), ("x-request-id", "req_7"),
        ("Sec-WebSocket-Extensions", "permessage-deflate; server_max_window_bits=12"),
    ])  # fmt: skip
    offered = [Subprotocol("realtime"), Subprotocol("openai-insecure-api-key.sk-proj-123")]
    with serving(store) as url:
        with connect(url + REALTIME + "?model=m", subprotocols=offered) as ws:
            assert ws.recv(timeout=10) == realtime_frames()[0][2]
            assert ws.subprotocol == "realtime"
            assert ws.response is not None
            got = ws.response.headers
            assert got["x-request-id"] == "req_7"
            assert "Sec-WebSocket-Extensions" not in got
            assert got["Sec-WebSocket-Accept"] != "c3RhbGUgYWNjZXB0IHRva2Vu"
            assert "sk-proj-123" not in str(got)
        with connect(url + REALTIME + "?model=m") as ws:  # offers none: gets none
            assert ws.subprotocol is None
            assert ws.recv(timeout=10) == realtime_frames()[0][2]


def test_server_frames_come_byte_for_byte_text_as_text_binary_as_binary(store: Store) -> None:
    big = "x" * 70_000  # a 64-bit length
    blob = bytes(range(256)) * 3  # not UTF-8: only a binary frame carries it
    frames: list[Frame] = [
        (1, "server", '{"type":"a","t":"\u00e9\u65e5 \U0001f600"}'),
        (2, "server", blob),
        (3, "server", big),
        (4, "server", ""),
        (5, "server", b"\x00"),
    ]
    record(store, "a" * 32, frames)
    with serving(store) as url, connect(url + REALTIME + "?model=m", max_size=None) as ws:
        got = [ws.recv(timeout=10) for _ in frames]
    assert got == [p for _, _, p in frames]
    assert [type(g) for g in got] == [str, bytes, str, str, bytes]


def test_each_answer_counts_from_the_client_frame_it_answers(store: Store) -> None:
    """A client that speaks 0.7 s later than recorded hears the answer at the recorded delay
    from its frame, not at once (counted from the upgrade, everything would be overdue)."""
    record(store, "a" * 32, realtime_frames())
    with serving(store) as url, connect(url + REALTIME + "?model=m") as ws:
        t0 = time.monotonic()
        ((first_at, _),) = timed(ws, 1, t0)
        assert first_at < 0.005 + MARGIN  # recorded 5 ms after the upgrade
        time.sleep(0.7)
        asked = time.monotonic()
        ws.send(ASK)
        got = timed(ws, len(ANSWER), asked)
    assert [m for _, m in got] == list(ANSWER)
    for (at, _), ms in zip(got, ANSWER_MS, strict=True):
        assert ms / 1000 - 0.005 <= at <= ms / 1000 + MARGIN, (ms, at)


def test_speed_scales_every_delay(store: Store) -> None:
    record(store, "a" * 32, realtime_frames())
    with serving(store, speed=2.0) as url, connect(url + REALTIME + "?model=m") as ws:
        ws.recv(timeout=10)
        asked = time.monotonic()
        ws.send(ASK)
        got = timed(ws, len(ANSWER), asked)
    last, recorded = got[-1][0], ANSWER_MS[-1] / 1000
    assert recorded / 2 - 0.005 <= last <= recorded * 0.75, last  # half the recorded delay


def test_a_differing_client_frame_is_a_miss_answered_with_an_error_event_at_once(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """OpenAI's way: an `error` event naming what differs, and the session goes on (the
    frame the recording holds still gets its answer). The log tells it as an HTTP miss."""
    record(store, "a" * 32, realtime_frames())
    wrong = '{"type":"response.create","response":{"instructions":"be brief"},"event_id":"e9"}'
    with (
        caplog.at_level(logging.WARNING, logger="ssetape.replay"),
        serving(store) as url,
        connect(url + REALTIME + "?model=m") as ws,
    ):
        ws.recv(timeout=10)
        sent = time.monotonic()
        ws.send(wrong)
        error = orjson.loads(ws.recv(timeout=2))
        took = time.monotonic() - sent
        ws.send('{"event_id": "e10", "type": "response.create"}')  # ids never count
        assert ws.recv(timeout=10) == ANSWER[0]
    assert took < 2.0
    assert error["type"] == "error" and error["error"]["code"] == "ssetape_replay_miss"
    assert error["error"]["event_id"] == "e9"
    assert "message.response (recorded" in error["error"]["message"]
    assert error["error"]["miss"]["nearest"][0]["name"] == "#1"
    logged = [r.getMessage() for r in caplog.records if "client frame 1" in r.getMessage()]
    assert logged and "no recording matches" in logged[0] and "#1" in logged[0], logged


def test_a_gemini_miss_is_a_close_1008_with_a_reason(store: Store) -> None:
    frames: list[Frame] = [
        (10, "client", b'{"setup":{"model":"models/gemini-live"}}'),
        (40, "server", b'{"setupComplete":{}}'),
    ]
    record(store, "a" * 32, frames, path=GEMINI, query="")
    with serving(store) as url, connect(url + GEMINI) as ws:
        sent = time.monotonic()
        ws.send(b'{"setup":{"model":"models/other"}}')
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=2)
        took = time.monotonic() - sent
    assert took < 2.0
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
    assert closed.value.rcvd.reason.startswith("ssetape replay miss")


def test_a_gemini_session_replays_binary_frames(store: Store) -> None:
    frames: list[Frame] = [
        (10, "client", b'{"setup":{"model":"models/gemini-live"}}'),
        (40, "server", b'{"setupComplete":{}}'),
    ]
    record(store, "a" * 32, frames, path=GEMINI, query="")
    with serving(store) as url, connect(url + GEMINI) as ws:
        ws.send(b'{"setup": {"model": "models/gemini-live"}}')  # canonical JSON matches
        assert ws.recv(timeout=10) == b'{"setupComplete":{}}'


def test_a_server_close_replays_with_its_code_and_reason_at_its_delay(store: Store) -> None:
    frames = realtime_frames()[:4]  # closed after the first delta
    record(store, "a" * 32, frames, error="the server closed the WebSocket session: 1011 "
           "upstream overloaded", end_ms=ASKED_MS + 120)  # fmt: skip
    with serving(store) as url, connect(url + REALTIME + "?model=m") as ws:
        ws.recv(timeout=10)
        time.sleep(0.3)
        asked = time.monotonic()
        ws.send(ASK)
        assert [ws.recv(timeout=10) for _ in range(2)] == list(ANSWER[:2])
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
        at = time.monotonic() - asked
    assert closed.value.rcvd is not None
    assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (1011, "upstream overloaded")
    assert 0.12 - 0.005 <= at <= 0.12 + MARGIN, at


def test_a_cut_replays_as_an_abnormal_closure(store: Store) -> None:
    """Recorded cut (TCP closed with no close frame): the replay closes the same way, so
    the client sees 1006, not a clean end."""
    frames = realtime_frames()[:4]
    record(store, "a" * 32, frames, state="truncated", end_ms=ASKED_MS + 100,
           error="the server closed the connection without a WebSocket close frame")  # fmt: skip
    with serving(store) as url, connect(url + REALTIME + "?model=m") as ws:
        ws.recv(timeout=10)
        ws.send(ASK)
        assert [ws.recv(timeout=10) for _ in range(2)] == list(ANSWER[:2])
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert closed.value.rcvd is None  # no close frame came
    assert ws.close_code == 1006


def test_a_client_close_is_answered_with_a_close(store: Store) -> None:
    record(store, "a" * 32, realtime_frames())
    with serving(store) as url, connect(url + REALTIME + "?model=m", close_timeout=2) as ws:
        ws.recv(timeout=10)
        ws.send(ASK)
        ws.recv(timeout=10)
        t = time.monotonic()
        ws.close(1000, "bye")
        assert time.monotonic() - t < 1.0  # answered, not waited out
        assert ws.close_code == 1000 and ws.close_reason == "bye"


def test_pings_are_answered(store: Store) -> None:
    record(store, "a" * 32, realtime_frames())
    with serving(store) as url, connect(url + REALTIME + "?model=m") as ws:
        assert ws.ping(b"hi").wait(5)


def test_responses_mode_answers_each_stream_from_its_own_recording(store: Store) -> None:
    """Responses WebSocket mode: two `response.create` on one socket, by `stream_id`. Each
    stream's events count from its own request: asked in the other order, 0.4 s apart, each
    still hears its answer at its recorded delay."""

    def ev(sid: str, kind: str, n: int = 0) -> str:
        return orjson.dumps({"type": kind, "stream_id": sid, "sequence_number": n}).decode()

    ask = {s: orjson.dumps({"type": "response.create", "stream_id": s, "model": "m"}).decode()
           for s in "ab"}  # fmt: skip
    frames: list[Frame] = [
        (10, "client", ask["a"]), (11, "client", ask["b"]),
        (20, "server", ev("a", "response.created")), (25, "server", ev("b", "response.created")),
        (110, "server", ev("a", "response.output_text.delta", 1)),
        (211, "server", ev("b", "response.output_text.delta", 1)),
        (212, "server", ev("b", "response.completed", 2)),
        (300, "server", ev("a", "response.completed", 2)),
    ]  # fmt: skip
    record(store, "a" * 32, frames, path="/v1/responses", query="")
    with serving(store) as url, connect(url + "/v1/responses") as ws:
        start = time.monotonic()
        got: list[tuple[float, str | bytes]] = []
        hearing = threading.Thread(target=lambda: got.extend(timed(ws, 6, start)))
        hearing.start()  # stamps each event as it comes, while this thread speaks
        ws.send(ask["b"])
        time.sleep(0.4)
        ws.send(ask["a"])
        hearing.join(20)
    by = {(orjson.loads(m)["stream_id"], orjson.loads(m)["type"]): at for at, m in got}
    due = {
        ("b", "response.created"): 0.014, ("b", "response.output_text.delta"): 0.2,
        ("b", "response.completed"): 0.201, ("a", "response.created"): 0.41,
        ("a", "response.output_text.delta"): 0.5, ("a", "response.completed"): 0.69,
    }  # fmt: skip
    for key, at in due.items():
        assert at - 0.005 <= by[key] <= at + MARGIN, (key, by[key], at)


def test_ignored_fields_leave_client_frames_alike(store: Store) -> None:
    """--ignore-field applies to client frames as to HTTP bodies."""
    frames = realtime_frames()
    frames[1] = (ASKED_MS, "client", '{"type":"response.create","metadata":{"run":"1"}}')
    record(store, "a" * 32, frames)
    with (
        serving(store, ignore=["metadata.run"]) as url,
        connect(url + REALTIME + "?model=m") as ws,
    ):
        ws.recv(timeout=10)
        ws.send('{"type":"response.create","metadata":{"run":"2"}}')
        assert ws.recv(timeout=10) == ANSWER[0]


@pytest.mark.parametrize("size", [0, 1, 125, 126, 65_535, 65_536, 200_000])
def test_a_framed_message_reads_back_whole(size: int) -> None:
    """Sans-IO framing against wsproto's own reader (a client's)."""
    payload = bytes(i % 251 for i in range(size))
    reader = FrameProtocol(client=True, extensions=[])
    reader.receive_bytes(frame(BINARY, payload) + frame(TEXT, b"ok"))
    got = list(reader.received_frames())
    assert [(f.opcode, f.message_finished) for f in got][-1] == (Opcode.TEXT, True)
    data = [f.payload for f in got if f.opcode is Opcode.BINARY]
    assert all(isinstance(d, bytes | bytearray) for d in data)
    assert b"".join(d for d in data if isinstance(d, bytes | bytearray)) == payload
