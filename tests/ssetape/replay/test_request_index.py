"""The replayer's index against a real SQLite store written by the real writer."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from ssetape.matching import canonical_request, fingerprint
from ssetape.redactor import Redactor
from ssetape.replay.request_index import Miss, RequestIndex
from ssetape.storage.store import Store
from ssetape.storage.writer import Writer

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
    index = RequestIndex(store, Redactor(b"k"))
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
    index = RequestIndex(store, Redactor(b"k"))
    assert index.lookup("POST", "api.example", "/v1/x", BINARY) == 1
    miss = index.lookup("POST", "api.example", "/v1/x", BINARY[:-1])
    assert isinstance(miss, Miss) and "body.sha256" in miss.message
    w.close()
    store.close()


def test_secrets_masked_with_another_stores_key_still_match(tmp_path: Path) -> None:
    """A cassette recorded elsewhere was masked with that machine's key: what matters for
    replay is that a secret was there, not which key masked it."""
    store = Store.open(str(tmp_path / "t.db"))
    elsewhere = Redactor(b"key on the recording machine", fields=["user_token"])
    w = Writer(store)
    w.start()
    recorded = elsewhere.body(b'{"q": "hi", "user_token": "s3cret"}')
    assert recorded is not None and b"s3cret" not in recorded
    begin(w, "d" * 32, recorded)
    w.finish("d" * 32, state="completed", status=200)
    assert w.flush()
    here = Redactor(b"key of this store", fields=["user_token"])
    index = RequestIndex(store, here)
    assert index.lookup("POST", "api.example", "/v1/x", b'{"q": "hi", "user_token": "other"}') == 1
    miss = index.lookup("POST", "api.example", "/v1/x", b'{"q": "bye", "user_token": "s3cret"}')
    assert isinstance(miss, Miss) and "body.q" in miss.message
    w.close()
    store.close()


def test_a_miss_on_a_tape_of_unreplayable_recordings_does_not_call_it_empty(
    tmp_path: Path,
) -> None:
    """A store that never took the responses (it stalled, the recorder stopped) leaves
    exchanges without a status: they cannot be served, and the miss says why, not "empty"."""
    store = Store.open(str(tmp_path / "t.db"))
    w = Writer(store)
    w.start()
    begin(w, "d" * 32, b'{"q": "lost"}')
    w.finish("d" * 32, state="interrupted")  # as the sweep leaves it; no status was stored
    assert w.flush()
    w.close()
    index = RequestIndex(store, Redactor(b"k"))
    miss = index.lookup("POST", "api.example", "/v1/x", b'{"q": "lost"}')
    assert isinstance(miss, Miss)
    assert "tape is empty" not in miss.message
    assert "no recording that can be replayed (1 without a stored response" in miss.message
    empty = RequestIndex(Store.open(str(tmp_path / "empty.db")), Redactor(b"k"))
    assert "the tape is empty" in empty.lookup("POST", "h", "/v1/x", b"{}").message  # type: ignore[union-attr]
    store.close()
