"""The replayer's index against a real SQLite store written by the real writer."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from bench.tapes import HOST, PATH, build_tape, chat_body
from ssetape.matching import canonical_request, fingerprint
from ssetape.redactor import Redactor
from ssetape.replay.miss import Miss, MissKind
from ssetape.replay.request_index import NEAREST_SCAN, RequestIndex
from ssetape.storage.store import Store
from ssetape.storage.writer import Writer

BINARY = bytes(range(256)) * 4


def begin(w: Writer, uid: str, body: bytes, *, scheme: str = "https", port: int = 443) -> None:
    canon = canonical_request("POST", "api.example", "/v1/x", "", body)
    w.begin(
        uid, started_at=datetime.now(UTC), method="POST", scheme=scheme, host="api.example",
        port=port, path="/v1/x", query="", http_version="HTTP/1.1", request_headers=[],
        request_body=body, fingerprint=fingerprint(canon),
    )  # fmt: skip


def recorded(w: Writer, uid: str, body: bytes, state: str = "completed", **where: Any) -> None:
    begin(w, uid, body, **where)
    w.update(uid, status=200)
    w.finish(uid, state=state)
    assert w.flush()


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
    miss = index.lookup("POST", "api.example", "/v1/x", b'{"q": "other"}')
    assert isinstance(miss, Miss)
    assert "tape is empty" not in miss.message
    assert "no recording that can be replayed (1 without a stored response" in miss.message
    assert "`ssetape list` shows them" in miss.message
    # The very request that was lost: its own recording is named, with the fix.
    miss = index.lookup("POST", "api.example", "/v1/x", b'{"q": "lost"}')
    assert isinstance(miss, Miss)
    assert "its recording (#1) has no stored response (interrupted)" in miss.message
    assert "Record it again with --record-mode new_episodes" in miss.message
    empty = RequestIndex(Store.open(str(tmp_path / "empty.db")), Redactor(b"k"))
    assert "the tape is empty" in empty.lookup("POST", "h", "/v1/x", b"{}").message  # type: ignore[union-attr]
    store.close()


def test_a_miss_ranks_the_tape_without_python_per_recording(tmp_path: Path) -> None:
    """A search for the nearest recordings runs in a thread while the loop plays timed
    streams; each bytecode it runs holds the interpreter lock the loop (in a test, the test's
    own threads too) waits for. 1,000 misses made a timed stream in the same process late by
    ~1 s: ranking 500 recordings ran Python functions for each. Now the ranking is C (set
    operations mapped over the candidates): the Python a miss runs does not grow with them."""

    def python_calls(exchanges: int) -> int:
        db = str(tmp_path / f"tape{exchanges}.db")
        build_tape(db, exchanges=exchanges, events=1, gap_us=1000)
        with Store.open(db) as store:
            index = RequestIndex(store, store.redactor())
            index.lookup("POST", HOST, PATH, chat_body("warm", stream=True))  # caches leaves
            # A recording with one field more: nearer than any other recording.
            recorded = orjson.loads(chat_body(f"tape {exchanges - 5}", stream=True))
            asked = orjson.dumps({**recorded, "temperature": 0.5})
            calls = 0

            def count(_frame: object, event: str, _arg: object) -> None:
                nonlocal calls
                calls += event == "call"

            sys.setprofile(count)
            try:
                miss = index.lookup("POST", HOST, PATH, asked)
            finally:
                sys.setprofile(None)
        assert isinstance(miss, Miss) and miss.nearest[0].id == exchanges - 4
        return calls

    few, many = python_calls(NEAREST_SCAN // 10), python_calls(NEAREST_SCAN + 100)
    assert many - few < NEAREST_SCAN // 10, (few, many)


def test_misses_on_a_tape_that_did_not_change_read_no_recording_again(tmp_path: Path) -> None:
    """Each miss must see the recordings committed before it came; under a storm that was a
    full read of the new rows for about every other miss (471 for 1,000). One look at the
    newest id tells that nothing changed; a recording made since is still found."""
    db = str(tmp_path / "tape.db")
    build_tape(db, exchanges=20, events=1, gap_us=1000)
    with Store.open(db) as store:
        index = RequestIndex(store, store.redactor())
        index.refresh()
        reads = 0
        merge = index._merge

        def counted(rows: Any) -> None:
            nonlocal reads
            reads += 1
            merge(rows)

        index._merge = counted  # type: ignore[method-assign]
        for n in range(50):
            assert isinstance(
                index.lookup("POST", HOST, PATH, chat_body(f"new {n}", stream=True)), Miss
            )
        assert reads == 0
        build_tape(db, exchanges=1, events=1, gap_us=1000)  # another recorder adds one
        assert index.lookup("POST", HOST, PATH, chat_body("timed", stream=True)) == 1
        assert isinstance(index.lookup("POST", HOST, PATH, chat_body("x", stream=True)), Miss)
        assert reads == 1


def test_a_miss_names_a_recorded_path_as_one_printable_line(tmp_path: Path) -> None:
    """A cassette's path is somebody's input: the miss that names it (printed to a terminal,
    a log, a test report) carries no escape sequence and forges no line."""
    store = Store.open(str(tmp_path / "t.db"))
    w = Writer(store)
    w.start()
    evil = "/v1/x\x1b]0;pwned\x07\nssetape: all requests matched\u202e"
    canon = canonical_request("POST", "api.example", evil, "", b"{}")
    w.begin(
        "e" * 32, started_at=datetime.now(UTC), method="POST", scheme="https", host="api.example",
        port=443, path=evil, query="", http_version="HTTP/1.1", request_headers=[],
        request_body=b"{}", fingerprint=fingerprint(canon),
    )  # fmt: skip
    w.update("e" * 32, status=200)
    w.finish("e" * 32, state="completed")
    assert w.flush()
    miss = RequestIndex(store, Redactor(b"k")).lookup("POST", "api.example", "/v1/y", b"{}")
    assert isinstance(miss, Miss) and "nearest is #1" in miss.message
    assert not any(c in miss.message for c in "\x1b\x07\n\u202e")
    assert "\\x1b]0;pwned\\x07\\nssetape: all requests matched" in miss.message
    w.close()
    store.close()


def test_a_miss_names_the_recording_that_differs_least_and_its_port(tmp_path: Path) -> None:
    """Asked for "alphb", the nearest is "alpha" (one letter off), not the newer "gamma
    gamma", though each differs in one field; its URL keeps the port it was recorded on."""
    store = Store.open(str(tmp_path / "t.db"))
    w = Writer(store)
    w.start()
    recorded(w, "a" * 32, b'{"q": "alpha"}', scheme="http", port=8080)
    recorded(w, "b" * 32, b'{"q": "gamma gamma"}', scheme="http", port=8080)
    miss = RequestIndex(store, Redactor(b"k")).lookup(
        "POST", "api.example", "/v1/x", b'{"q": "alphb"}', port=8080
    )
    assert isinstance(miss, Miss) and miss.kind is MissKind.DIFFERS
    assert [c.id for c in miss.nearest] == [1, 2]
    assert miss.message.startswith(
        "no recording matches POST api.example:8080/v1/x; nearest is #1: "
        "POST http://api.example:8080/v1/x, which differs in body.q (recorded 'alpha', "
        "requested 'alphb')."
    ), miss.message
    w.close()
    store.close()


def test_a_cut_recording_never_shadows_a_whole_one(tmp_path: Path) -> None:
    """The upstream cut the first recording; the request recorded again whole is what is
    served, every time. A request recorded only cut replays as recorded, except when
    recording new episodes: then it is a miss that says so, and goes upstream again."""
    store = Store.open(str(tmp_path / "t.db"))
    w = Writer(store)
    w.start()
    recorded(w, "a" * 32, b'{"q": "hi"}', state="truncated")
    recorded(w, "b" * 32, b'{"q": "hi"}')
    recorded(w, "c" * 32, b'{"q": "only cut"}', state="truncated")
    index = RequestIndex(store, Redactor(b"k"))
    assert [index.lookup("POST", "api.example", "/v1/x", b'{"q": "hi"}') for _ in "123"] == [2] * 3
    assert index.lookup("POST", "api.example", "/v1/x", b'{"q": "only cut"}') == 3
    episodes = RequestIndex(store, Redactor(b"k"), rerecord_cut=True)
    assert episodes.lookup("POST", "api.example", "/v1/x", b'{"q": "hi"}') == 2
    miss = episodes.lookup("POST", "api.example", "/v1/x", b'{"q": "only cut"}')
    assert isinstance(miss, Miss) and miss.kind is MissKind.CUT
    assert "recording POST api.example/v1/x again: its recording(s) on the tape (#3)" in (
        miss.message
    )
    recorded(w, "d" * 32, b'{"q": "only cut"}')  # recorded again, whole
    assert episodes.lookup("POST", "api.example", "/v1/x", b'{"q": "only cut"}') == 4
    w.close()
    store.close()


def test_a_miss_is_a_typed_value_named_as_its_reader_knows_recordings(tmp_path: Path) -> None:
    """The index names recordings as it is told (a test: by cassette line), so the 404's
    body and the report say the same; a prompt that looks like a name ("#1 ") is left as it
    is; the typed JSON in the 404's body gives the same miss back."""
    store = Store.open(str(tmp_path / "t.db"))
    w = Writer(store)
    w.start()
    recorded(w, "a" * 32, b'{"q": "see #1 here"}')
    index = RequestIndex(store, Redactor(b"k"), name=lambda xid: f"cassette line {xid + 1}")
    miss = index.lookup("POST", "api.example", "/v1/x", b'{"q": "see #1 there"}')
    assert isinstance(miss, Miss)
    assert "nearest is cassette line 2: POST https://api.example/v1/x" in miss.message
    assert "(recorded 'see #1 here', requested 'see #1 there')" in miss.message
    error = orjson.loads(miss.body())["error"]
    assert error["message"] == miss.message
    assert error["nearest"][0]["name"] == "cassette line 2"
    assert Miss.from_json(error["miss"]) == miss
    w.close()
    store.close()
