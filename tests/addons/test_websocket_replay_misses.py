"""A WebSocket session's client frame that differs from the recording is a miss like a request
the tape does not hold: `ssetape replay` tells both on its log the same way (the nearest
recording, the fields that differ, what to do) and counts both in its stop line's `missed`,
whether its own replay server answers or mitmproxy in front of its timed server (`--set`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import httpx
import openai
import pytest
from openai.types.realtime import RealtimeErrorEvent
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from ssetape.storage.store import Store
from tests.conftest import Proc
from tests.ssetape.replay.ws_tapes import (
    ANSWER,
    GEMINI,
    UPSTREAM,
    Frame,
    realtime_frames,
    record,
)

KEY = "sk-proj-SECRETrealtimeKEY0123456789"
SETUP: Frame = (10, "client", b'{"setup":{"model":"models/gemini-live"}}')


@pytest.mark.parametrize("front", [(), ("--set", "stream_large_bodies=1m")],
                         ids=["replay-server", "mitmproxy"])  # fmt: skip
def test_a_frame_miss_is_told_and_counted_with_the_http_misses(
    ssetape_proc: Callable[..., Proc], tmp_path: Path, front: tuple[str, ...]
) -> None:
    db = str(tmp_path / "tape.db")
    with Store.open(db) as store:
        record(store, "a" * 32, realtime_frames())
        record(store, "b" * 32, [SETUP, (40, "server", b'{"setupComplete":{}}')], path=GEMINI,
               query="")  # fmt: skip
    proc = ssetape_proc("replay", "--mode", f"reverse:{UPSTREAM}", *front, db=db)
    client = openai.OpenAI(base_url=proc.url + "/v1", api_key=KEY, max_retries=0)
    with client.realtime.connect(model="m") as conn:
        conn.recv_bytes()  # session.created
        conn.response.create(response={"instructions": "be brief"})  # not what was recorded
        event = RealtimeErrorEvent.model_validate_json(conn.recv_bytes())
        conn.response.create()  # the recorded one: the session goes on
        assert conn.recv_bytes() == ANSWER[0].encode()
    assert event.error.code == "ssetape_replay_miss"
    with connect(proc.url.replace("http", "ws", 1) + GEMINI) as ws:  # Gemini Live: a close
        ws.send(b'{"setup":{"model":"models/other"}}')
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=10)
    assert ws.close_code == 1008
    asked = httpx.post(proc.url + "/v1/chat/completions", json={"model": "m"}, timeout=10)
    assert asked.status_code == 404  # an HTTP miss beside them
    assert proc.stop() == 0
    log = proc.log.decode()
    assert "replayed 2, missed 3" in log, log
    told = [line for line in log.splitlines() if "no recording matches" in line]
    assert len(told) == 3, log
    frame_line = next(line for line in told if "client frame 1 of GET" in line)
    http_line = next(line for line in told if "POST " in line)
    # Explained as the HTTP miss is: the nearest recording, what differs, what to do.
    assert re.search(r"nearest is #1: GET \S+/v1/realtime, client frame 1, which differs in "
                     r"message\.response \(recorded '<absent>', requested \{'instructions'",
                     frame_line), frame_line  # fmt: skip
    # The same advice, but for the mode that records it: new_episodes records what misses
    # whole (the HTTP request; a session whose upgrade misses), not a session's frame.
    assert "Record it with --record-mode new_episodes, or leave" in http_line, http_line
    assert "Record it with --record-mode all, or leave" in frame_line, frame_line
