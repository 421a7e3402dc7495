"""The recording process's handling of the proxy's messages, in process with a real SQLite
store: what it does not know is an error it says once, and never stops the rest."""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path

import pytest

from ssetape.recording.protocol import BEGIN, CHUNK, FINISH, STREAM, UPDATE, WorkerConfig
from ssetape.recording.worker import RecordWorker
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
    worker.handle_batch(
        [
            (BEGIN, "u1", fields()),
            ("zz", "u1", 1),  # type: ignore[list-item]  # from a newer proxy, say
            (UPDATE, "u1", {"status": 200, "is_stream": True}),
            (STREAM, "u1", "sse", "", 1 << 20, 1 << 20),
            (CHUNK, "u1", 1000, b"data: 1\n\ndata: 2\n\n"),
            ("zz", "u1", 2),  # type: ignore[list-item]
            (FINISH, "u1", 2000, {"state": "completed", "error": None}),
        ]
    )
    final = worker.stop()
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "unknown kind 'zz'" in errors[0]
    assert (final.exchanges_recorded, final.events_recorded, final.events_lost) == (1, 2, 0)
    with Store.open(db, create=False) as store:
        (x,) = store.exchanges()
        assert (x.state, x.event_count) == ("completed", 2)
        assert [e.data for e in store.events(x.id)] == ["1", "2"]
