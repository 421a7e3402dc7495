"""WebSocket sessions recorded through `ssetape record` and replayed offline by `ssetape
replay` (the upstream stopped), with the official openai SDK as the client both times: the
Realtime client (`client.realtime.connect`) and the Responses WebSocket client
(`client.responses.connect`), in reverse mode and in forward mode through the CA of `ssetape
ca`. The same server frames come byte for byte at their recorded delays from the client frame
they answer; a differing client frame is a miss; a server's close and a cut end the replay as
they ended the recording."""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import openai
import pytest
from openai.types.realtime import RealtimeErrorEvent
from openai.types.websocket_connection_options import WebSocketConnectionOptions
from websockets.exceptions import ConnectionClosed

from ssetape.simulator.simulator import Simulator
from ssetape.simulator.ws_realtime import CLOSE_CODE, CLOSE_REASON, DELTAS
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from tests.conftest import Proc, self_signed

KEY = "sk-proj-SECRETrealtimeKEY0123456789"
MARGIN = 0.1  # seconds late, at most: a loaded 2-core machine
Heard = list[tuple[float, bytes]]  # (seconds after the client's response.create, payload)


def realtime(base: str, model: str, *, think: float = 0.0, wss: dict[str, Any] | None = None,
             create: dict[str, Any] | None = None) -> tuple[bytes, Heard, str | None]:  # fmt: skip
    """One Realtime session through ``base``: session.created, then (after ``think`` s) one
    response.create; the frames of its answer as the SDK hands them over, and how it ended
    (a close code and reason, or None if the answer completed)."""
    client = openai.OpenAI(base_url=base + "/v1", api_key=KEY, max_retries=0)
    heard: Heard = []
    end = None
    options = cast(WebSocketConnectionOptions, wss or {})
    with client.realtime.connect(model=model, websocket_connection_options=options) as conn:
        first = conn.recv_bytes()
        time.sleep(think)
        asked = time.monotonic()
        conn.response.create(**(create or {}))
        try:
            while True:
                data = conn.recv_bytes()
                heard.append((time.monotonic() - asked, data))
                if b'"response.done"' in data or b'"type":"error"' in data:
                    break
        except ConnectionClosed as e:
            end = f"{e.rcvd.code} {e.rcvd.reason}" if e.rcvd else "no close frame"
    return first, heard, end


def recorded(db: str) -> list[tuple[list[tuple[float, bytes]], float]]:
    """Each stored session: its server frames after the client's first frame (seconds from
    that frame), and when that frame was (from the upgrade)."""
    with Store.open(db, create=False) as store:
        q = Queries(store)
        out = []
        for x in q.exchanges(newest_first=False):
            events = list(q.events(x.id))
            asked = next(e.offset_us for e in events if e.direction == "client")
            after = [((e.offset_us - asked) / 1e6, bytes(e.raw)) for e in events
                     if e.direction == "server" and e.offset_us >= asked]  # fmt: skip
            out.append((after, asked / 1e6))
        return out


def assert_on_time(heard: Heard, then: list[tuple[float, bytes]]) -> None:
    """Byte for byte, each frame at its recorded delay from the client's frame."""
    assert [d for _, d in heard] == [d for _, d in then]
    for (at, data), (due, _) in zip(heard, then, strict=True):
        assert due - 0.005 <= at <= due + MARGIN, (data[:60], at, due)


def test_a_realtime_session_replays_offline_byte_for_byte_at_its_delays(
    ssetape_proc: Callable[..., Proc],
) -> None:
    with Simulator().serve_in_thread() as upstream:
        url = upstream.url
        rec = ssetape_proc("record", "--mode", f"reverse:{url}")
        first_then, heard_then, _ = realtime(rec.url, "ok")
        assert rec.stop() == 0, rec.log.decode()
    ((then, asked_then),) = recorded(rec.db)
    assert [d for _, d in heard_then] == [d for _, d in then]  # the tape holds what came
    # The upstream is gone: every frame below comes from the tape.
    proc = ssetape_proc("replay", "--mode", f"reverse:{url}", db=rec.db)
    first, heard, end = realtime(proc.url, "ok")
    assert first == first_then and end is None
    assert_on_time(heard, then)
    # A client that speaks a second later than the recorded one still hears the answer at the
    # recorded delays from its frame (counted from the upgrade, all of it would be overdue).
    assert asked_then < 0.5
    first, heard, _ = realtime(proc.url, "ok", think=1.0)
    assert first == first_then
    assert_on_time(heard, then)
    assert sum(b'"response.output_text.delta"' in d for _, d in heard) == len(DELTAS)
    assert proc.stop() == 0
    assert b"replayed 2, missed 0" in proc.log, proc.log.decode()


def test_a_differing_client_frame_is_a_miss_answered_within_two_seconds(
    ssetape_proc: Callable[..., Proc],
) -> None:
    with Simulator().serve_in_thread() as upstream:
        url = upstream.url
        rec = ssetape_proc("record", "--mode", f"reverse:{url}")
        realtime(rec.url, "ok")
        assert rec.stop() == 0
    proc = ssetape_proc("replay", "--mode", f"reverse:{url}", db=rec.db)
    _, heard, _ = realtime(proc.url, "ok", create={"response": {"instructions": "be brief"}})
    ((at, data),) = heard
    assert at < 2.0
    event = RealtimeErrorEvent.model_validate_json(data)  # what the SDK parses it as
    assert event.type == "error"
    assert event.error.code == "ssetape_replay_miss"
    assert "message.response" in event.error.message
    assert proc.stop() == 0
    log = proc.log.decode()
    assert "no recording matches client frame 1 of GET" in log and "#1" in log, log


@pytest.mark.parametrize(
    ("model", "ending"),
    [("close", f"{CLOSE_CODE} {CLOSE_REASON}"), ("cut", "no close frame")],
    ids=["server-error-close", "cut"],
)
def test_a_server_close_and_a_cut_end_the_replay_as_recorded(
    ssetape_proc: Callable[..., Proc], model: str, ending: str
) -> None:
    with Simulator().serve_in_thread() as upstream:
        url = upstream.url
        rec = ssetape_proc("record", "--mode", f"reverse:{url}")
        _, heard_then, end_then = realtime(rec.url, model)
        assert rec.stop() == 0
    assert heard_then and (end_then == ending or model == "cut")
    ((then, _),) = recorded(rec.db)
    proc = ssetape_proc("replay", "--mode", f"reverse:{url}", db=rec.db)
    _, heard, end = realtime(proc.url, model)
    assert end == ending  # the cut too: an abnormal closure, as the upstream did it
    assert_on_time(heard, then)
    assert proc.stop() == 0


def test_responses_websocket_mode_answers_each_turn_from_its_own_recording(
    ssetape_proc: Callable[..., Proc],
) -> None:
    """Two responses on one socket, the second chained to the first: each answered from its
    own recorded turn, at its delays from its own response.create."""

    def turns(base: str, think: float) -> list[Heard]:
        client = openai.OpenAI(base_url=base + "/v1", api_key=KEY, max_retries=0)
        out: list[Heard] = []
        previous = None
        with client.responses.connect() as conn:
            for text in ("first", "second"):
                time.sleep(think)
                asked = time.monotonic()
                conn.response.create(model="gpt-5-mini", input=text, store=False,
                                     previous_response_id=previous or openai.omit)  # fmt: skip
                heard: Heard = []
                while True:
                    data = conn.recv_bytes()
                    heard.append((time.monotonic() - asked, data))
                    event = conn.parse_event(data)
                    if event.type == "response.completed":
                        previous = event.response.id
                        break
                out.append(heard)
        return out

    with Simulator().serve_in_thread() as upstream:
        url = upstream.url
        rec = ssetape_proc("record", "--mode", f"reverse:{url}")
        then = turns(rec.url, 0.0)
        assert rec.stop() == 0
    proc = ssetape_proc("replay", "--mode", f"reverse:{url}", db=rec.db)
    now = turns(proc.url, 0.5)
    for heard, heard_then in zip(now, then, strict=True):
        assert [d for _, d in heard] == [d for _, d in heard_then]
        assert heard[-1][0] <= heard_then[-1][0] + 2 * MARGIN
        assert heard[-1][0] >= 0.5 * heard_then[-1][0]  # at its pace, not at once
    assert proc.stop() == 0
    assert b"missed 0" in proc.log, proc.log.decode()


def test_forward_mode_through_the_ca_replays_a_realtime_session(
    ssetape_proc: Callable[..., Proc], tmp_path: Path, confdir: Path
) -> None:
    """HTTPS_PROXY-style: the SDK's websockets client tunnels with CONNECT to wss://; the
    recording proxy and then the replay server end the tunnel with the CA of `ssetape ca`."""
    cert, key = self_signed(tmp_path)
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert, key)
    trust = ssl.create_default_context(cafile=confdir / "mitmproxy-ca-cert.pem")
    with Simulator(ssl=server_tls).serve_in_thread() as upstream:
        url = upstream.url
        base = url.replace("127.0.0.1", "localhost")
        rec = ssetape_proc("record", "--set", f"ssl_verify_upstream_trusted_ca={cert}")
        first_then, _, _ = realtime(base, "ok", wss={"proxy": rec.url, "ssl": trust})
        assert rec.stop() == 0, rec.log.decode()
    ((then, _),) = recorded(rec.db)
    proc = ssetape_proc("replay", db=rec.db)
    assert b"HTTPS_PROXY" in proc.log  # forward mode, answered by ssetape's own server
    first, heard, end = realtime(base, "ok", think=0.5, wss={"proxy": proc.url, "ssl": trust})
    assert first == first_then and end is None
    assert_on_time(heard, then)
    assert proc.stop() == 0
