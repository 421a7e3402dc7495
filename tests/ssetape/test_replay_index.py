"""The replayer's index against a real SQLite store written by the real writer."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from ssetape.storage.store import Store
from ssetape.storage.writer import Writer

from ssetape.matching import canonical_request, fingerprint
from ssetape.redactor import Redactor
from ssetape.replay_index import Miss, ReplayIndex

BINARY = bytes(range(256)) * 4


def begin(w: Writer, uid: str, body: bytes) -> None:
    canon = canonical_request("POST", "api.example", "/v1/x", "", body)
    w.begin(
        uid, started_at=datetime.now(UTC), method="POST", scheme="https", host="api.example",
        port=443, path="/v1/x", query="", http_version="HTTP/1.1", request_headers=[],
        request_body=body, fingerprint=fingerprint(canon),
    )  # fmt: skip


def test_a_slow_recording_finished_after_a_refresh_is_still_found(tmp_path: Path) -> None:
    store = Store.open(str(tmp_path / "t.db"))
    w = Writer(store)
    w.start()
    begin(w, "a" * 32, b'{"q": "slow"}')
    begin(w, "b" * 32, b'{"q": "fast"}')
    w.update("b" * 32, status=200)
    w.finish("b" * 32, state="completed")
    assert w.flush()
    index = ReplayIndex(store, Redactor(b"k"))
    assert index.lookup("POST", "api.example", "/v1/x", b'{"q": "fast"}') == 2
    assert isinstance(index.lookup("POST", "api.example", "/v1/x", b'{"q": "slow"}'), Miss)
    w.update("a" * 32, status=200)
    w.finish("a" * 32, state="completed")
    assert w.flush()
    assert index.lookup("POST", "api.example", "/v1/x", b'{"q": "slow"}') == 1
    w.close()
    store.close()


def test_binary_bodies_match_by_content(tmp_path: Path) -> None:
    store = Store.open(str(tmp_path / "t.db"))
    w = Writer(store)
    w.start()
    begin(w, "c" * 32, BINARY)
    w.update("c" * 32, status=200)
    w.finish("c" * 32, state="completed")
    assert w.flush()
    index = ReplayIndex(store, Redactor(b"k"))
    assert index.lookup("POST", "api.example", "/v1/x", BINARY) == 1
    miss = index.lookup("POST", "api.example", "/v1/x", BINARY[:-1])
    assert isinstance(miss, Miss) and "body.sha256" in miss.message
    w.close()
    store.close()
