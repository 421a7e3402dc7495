"""A long session is played from pages of the store (issue 42): a large client frame, whose
canonical form is not kept, still matches by its canonical JSON, and a miss against it still
says which field differs; many server frames past the first page come byte for byte."""

from __future__ import annotations

import orjson
from websockets.sync.client import connect

from ssetape.storage.store import Store
from tests.ssetape.replay.ws_tapes import ANSWER, REALTIME, realtime_frames, record, serving

AUDIO = "A" * (16 << 10)  # over what a kept client frame may be


def test_a_large_client_frame_matches_by_its_canonical_json_and_a_miss_says_what_differs(
    store: Store,
) -> None:
    append = orjson.dumps({"type": "input_audio_buffer.append", "audio": AUDIO}).decode()
    record(store, "a" * 32, [(1, "client", append), *realtime_frames()])
    with serving(store) as url, connect(url + REALTIME + "?model=m", max_size=None) as ws:
        ws.send('{"type":"input_audio_buffer.append","audio":"' + AUDIO[:-1] + 'B"}')
        error = orjson.loads(ws.recv(timeout=10))
        # The same frame, keys in another order: a match.
        ws.send(orjson.dumps({"audio": AUDIO, "event_id": "e1",
                              "type": "input_audio_buffer.append"}).decode())  # fmt: skip
        ws.recv(timeout=10)  # session.created
        ws.send('{"type":"response.create"}')
        got = [ws.recv(timeout=10) for _ in ANSWER]
    assert error["error"]["code"] == "ssetape_replay_miss"
    assert "message.audio (recorded 'AAAA" in error["error"]["message"], error
    assert got == list(ANSWER)


def test_server_frames_past_many_pages_come_byte_for_byte(store: Store) -> None:
    many = [(1 + n // 50, "server", f'{{"n":{n},"pad":"{"x" * (n % 7000)}"}}') for n in range(3000)]
    record(store, "a" * 32, many)
    with serving(store, speed=0) as url, connect(url + REALTIME + "?model=m", max_size=None) as ws:
        got = [ws.recv(timeout=10) for _ in many]
    assert got == [p for _, _, p in many]
