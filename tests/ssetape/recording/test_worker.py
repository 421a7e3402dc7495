"""The recording process's handling of the proxy's messages, in process with a real SQLite
store: what it does not know is an error it says once, and never stops the rest."""

from __future__ import annotations

import datetime as dt
import io
import logging
import pickle
from pathlib import Path

import pytest

from ssetape.framing import eventstream
from ssetape.framing.framings import Framing
from ssetape.recording.protocol import (
    HEADER,
    Begin,
    Chunk,
    Finish,
    Message,
    Stream,
    Update,
    WorkerConfig,
    encode_frame,
    read_frames,
)
from ssetape.recording.worker import RecordWorker
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store


def fields() -> dict[str, object]:
    return {
        "started_at": dt.datetime.now(dt.UTC),
        "method": "POST",
        "scheme": "http",
        "host": "127.0.0.1",
        "port": 9,
        "path": "/v1/chat/completions",
        "query": "",
        "http_version": "HTTP/1.1",
        "request_headers": [],
        "request_body": b"{}",
        "fingerprint": "f" * 64,
    }


def test_an_unknown_message_is_logged_once_and_the_rest_is_stored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = str(tmp_path / "tape.db")
    Store.open(db).close()
    worker = RecordWorker(WorkerConfig(db=db, max_pending=1000, active=True))
    worker.start()
    caplog.set_level(logging.ERROR, "ssetape.recorder")
    known = encode_frame(
        [
            Begin("u1", fields()),
            Update("u1", {"status": 200, "is_stream": True}),
            Stream("u1", "sse", "", 1 << 20, 1 << 20),
            Chunk("u1", 1000, b"data: 1\n\ndata: 2\n\n"),
        ]
    )
    newer = pickle.dumps([("zz", "u1", 1), ("zz", "u1", 2)])  # from a newer proxy, say
    end = encode_frame([Finish("u1", 2000, {"state": "completed", "error": None})])
    pipe = io.BytesIO(known + HEADER.pack(len(newer)) + newer + end)
    for batch in read_frames(pipe):
        worker.handle_batch(batch)
    final = worker.stop()
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "unknown kind 'zz'" in errors[0]
    assert (final.exchanges_recorded, final.events_recorded, final.events_lost) == (1, 2, 0)
    with Store.open(db, create=False) as store:
        (x,) = Queries(store).exchanges()
        assert (x.state, x.event_count) == ("completed", 2)
        assert [e.data for e in Queries(store).events(x.id)] == ["1", "2"]


def _frames() -> list[bytes]:
    one, two, three = (
        eventstream.encode_frame({":message-type": "event"}, b'{"bytes": "%s"}' % b64)
        for b64 in (b"YQ==", b"Yg==", b"Yw==")
    )
    return [one + two + three[:5], three[5:]]  # three frames, the last split in two


# Each stream as it would be stored: events (SSE, its split blank lines too), lines (NDJSON),
# frames (AWS event stream), chunks (a JSON array).
STREAMS = {
    Framing.SSE: [b"data: 1\n", b"\n", b"data: 2\n", b"\n", b"data: 3"],
    Framing.NDJSON: [b'{"a": 1}\n{"a": 2}\n{"a"', b': 3}\n{"a": 4}'],
    Framing.CHUNKS: [b'[{"a": 1}\n\n', b',{"a": 2}\n\n\n\n', b"]"],
    Framing.EVENTSTREAM: _frames(),
}


@pytest.mark.parametrize("framing", list(STREAMS))
def test_the_events_of_an_exchange_it_never_saw_begin_are_counted_as_they_would_be_stored(
    tmp_path: Path, framing: Framing
) -> None:
    """Chunks of an exchange begun elsewhere (in a recording process that died): the events
    they hold are lost, counted by the stream's framing, as many as the store would have."""
    db = str(tmp_path / "tape.db")
    Store.open(db).close()
    worker = RecordWorker(WorkerConfig(db=db, max_pending=1000, active=True))
    worker.start()
    chunks = STREAMS[framing]
    batch: list[Message] = [Begin("kept", fields())]
    for uid in ("kept", "stray"):
        batch.append(Stream(uid, framing.value, "", 1 << 20, 1 << 20))
        batch += [Chunk(uid, 1000 + i, c) for i, c in enumerate(chunks)]
        batch.append(Finish(uid, 2000, {"state": "completed", "error": None}))
    worker.handle_batch(batch)
    final = worker.stop()
    with Store.open(db, create=False) as store:
        (x,) = Queries(store).exchanges()
        stored = len(list(Queries(store).events(x.id)))
    assert stored > 1 and final.events_recorded == stored
    assert final.events_lost == stored  # the stray's: the same stream, never begun here
