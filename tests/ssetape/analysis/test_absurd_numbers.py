"""One absurd number costs only its own exchange: a usage of 2**63 tokens recorded through
`ssetape record` beside four clean streams in one writer batch, a gap past BIGINT, an
exchange the store rejects; `reindex` analyses the rest and names what it skipped
(SQLite and PostgreSQL)."""

from __future__ import annotations

import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from ssetape.analysis.knowledge import ANALYSIS_VERSION, Knowledge
from ssetape.records import EventRow
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from ssetape.storage.writer import Writer
from tests.addons.stores import Recorders
from tests.conftest import SSETAPE
from tests.upstreams import read_request, serving

HUGE = 2**63
CHAT = {"model": "gpt-4o-mini", "stream": True, "messages": [{"role": "user", "content": "hi"}]}


def _stream(text_: bytes, prompt_tokens: int) -> bytes:
    head = b'{"id":"c","object":"chat.completion.chunk","model":"gpt-4o-mini","choices":'
    usage = b'"usage":{"prompt_tokens":%d,"completion_tokens":2,"total_tokens":%d}' % (
        prompt_tokens,
        prompt_tokens + 2,
    )
    return b"".join(
        [
            b'data: %s[{"index":0,"delta":{"content":"%s"},"finish_reason":null}]}\n\n'
            % (head, text_),
            b'data: %s[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n' % head,
            b"data: %s[],%s}\n\n" % (head, usage),
            b"data: [DONE]\n\n",
        ]
    )


@pytest.fixture
def recorders(tmp_path: Path, confdir: Path) -> Iterator[Recorders]:
    r = Recorders(tmp_path, confdir)
    yield r
    r.stop_all()


def _knowledge(url: str) -> dict[str, tuple[Any, ...]]:
    with Store.open(url, create=False) as store:
        return {
            x.output_text or "": (
                x.model,
                x.outcome,
                x.input_tokens,
                x.output_tokens,
                x.cost_nusd is not None,
                x.price_note,
                x.analysis_version,
            )
            for x in Queries(store).exchanges()
        }


def _reindex(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SSETAPE, "reindex", *args, "--db", url], capture_output=True, text=True, timeout=120
    )


def test_a_usage_of_2_63_tokens_costs_only_its_own_exchange(
    store_url: str, recorders: Recorders
) -> None:
    """Five streams finish together (one writer batch); one reports 2**63 prompt tokens. The
    four others keep model, usage and price; the absurd one keeps its model and outcome, its
    count is unknown and it has no price, saying why. `reindex` and `reindex --stale` exit 0
    and leave the same."""
    together = threading.Barrier(5, timeout=20)

    def serve(conn: socket.socket) -> None:
        with conn:
            got = read_request(conn, b"")
            if got is None:
                return
            n = int(got[0]["x-n"])
            body = _stream(b"ok %d" % n, HUGE if n == 2 else 3)
            together.wait()
            conn.sendall(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"content-length: %d\r\n\r\n%s" % (len(body), body)
            )

    with serving(serve) as upstream:
        rec = recorders.start(store_url, "--mode", f"reverse:{upstream}")

        def one(n: int) -> int:
            r = httpx.post(rec.url + "/v1/chat/completions", json=CHAT, headers={"x-n": str(n)})
            return r.status_code

        with ThreadPoolExecutor(5) as pool:
            assert list(pool.map(one, range(5))) == [200] * 5
        assert rec.stop() == 0, rec.log.decode()
    assert b"failed" not in rec.log and b"not analysed" not in rec.log, rec.log.decode()
    note = f"input_tokens {HUGE}, total_tokens {HUGE + 2} past a 32-bit count, stored as unknown"
    rates = "openai's rates (by model: host unknown)"
    want = {
        f"ok {n}": ("gpt-4o-mini", "completed", None, 2, False, note, ANALYSIS_VERSION)
        if n == 2
        else ("gpt-4o-mini", "completed", 3, 2, True, rates, ANALYSIS_VERSION)
        for n in range(5)
    }
    assert _knowledge(store_url) == want
    for args in (["--stale"], []):
        with Store.open(store_url, create=False) as store, store.engine.begin() as conn:
            conn.execute(text("UPDATE exchanges SET analysis_version = NULL"))  # all stale
        done = _reindex(store_url, *args)
        assert done.returncode == 0, done.stderr
        assert "reindexed 5 exchange(s)" in done.stdout and done.stderr == ""
        assert _knowledge(store_url) == want


def _rows(offsets: list[int]) -> list[EventRow]:
    datas = [
        '{"model":"m1","choices":[{"index":0,"delta":{"content":"a"}}]}',
        '{"model":"m1","choices":[{"index":0,"delta":{"content":"b"}}]}',
        '{"model":"m1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}',
        "[DONE]",
    ]
    return [
        (i, at, None, d, None, f"data: {d}\n\n".encode())
        for i, (d, at) in enumerate(zip(datas, offsets, strict=True))
    ]


def _reject_analysis_of(store: Store, host: str) -> None:
    """A trigger that makes the store refuse to store the analysis of ``host``'s exchanges,
    as it may refuse a value nobody foresaw."""
    when = f"NEW.host = '{host}' AND NEW.analysis_version IS NOT NULL"
    with store.engine.begin() as conn:
        if store.engine.dialect.name == "sqlite":
            conn.execute(text(
                f"CREATE TRIGGER reject BEFORE UPDATE ON exchanges WHEN {when} "
                "BEGIN SELECT RAISE(ABORT, 'refused by trigger'); END"
            ))  # fmt: skip
            return
        conn.execute(text(
            "CREATE FUNCTION reject() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"IF {when} THEN RAISE EXCEPTION 'refused by trigger'; END IF; RETURN NEW; END $$"
        ))  # fmt: skip
        conn.execute(text(
            "CREATE TRIGGER reject BEFORE UPDATE ON exchanges "
            "FOR EACH ROW EXECUTE FUNCTION reject()"
        ))  # fmt: skip


def _record(
    store: Store, fields: Callable[..., dict[str, Any]], on_finished: Any = None
) -> dict[str, int]:
    """Four exchanges stored in one batch: a clean one, one whose content events are 2**63 us
    apart, one on the host the store refuses, another clean one. Their ids by name."""
    offsets = {
        "clean": [10, 20, 30, 40],
        "wide": [-(2**62), 2**62, 2**62, 2**62],
        "refused": [10, 20, 30, 40],
        "clean2": [10, 20, 30, 40],
    }
    w = Writer(store, on_finished=on_finished)
    w.start()
    try:
        for name, at in offsets.items():
            uid = name.ljust(32, "x")
            host = "refused.test" if name == "refused" else "api.openai.com"
            w.begin(uid, **fields(host=host))
            w.add_events(uid, _rows(at))
        for name in offsets:
            w.finish(name.ljust(32, "x"), state="completed", status=200)
        assert w.flush()
    finally:
        w.close()
    ids = {}
    for name in offsets:
        x = Queries(store).exchange(name.ljust(32, "x"))
        assert x is not None
        ids[name] = x.id
    return ids


def _analysed(store: Store) -> dict[int, tuple[Any, ...]]:
    return {
        x.id: (x.outcome, x.output_text, x.ttft_us, x.gap_max_us)
        for x in Queries(store).exchanges()
    }


def test_reindex_skips_and_names_what_it_cannot_store_and_analyses_the_rest(
    store: Store, store_url: str, exchange_fields: Callable[..., dict[str, Any]]
) -> None:
    ids = _record(store, exchange_fields)
    _reject_analysis_of(store, "refused.test")
    done = _reindex(store_url)
    assert done.returncode == 0, done.stderr
    assert "reindexed 3 exchange(s)" in done.stdout
    [line] = done.stderr.splitlines()
    assert line.startswith(f"not analysed: 1 exchange(s): exchange {ids['refused']} (")
    assert "refused by trigger" in line and "Traceback" not in done.stderr
    assert _analysed(store) == {
        ids["clean"]: ("completed", "ab", 10, 10),
        ids["wide"]: ("completed", "ab", -(2**62), None),  # a gap of 2**63 us: unknown
        ids["refused"]: (None, None, None, None),
        ids["clean2"]: ("completed", "ab", 10, 10),
    }
    stale = _reindex(store_url, "--stale")  # tried again, and named again
    assert stale.returncode == 0 and "reindexed 0 exchange(s)" in stale.stdout
    assert f"exchange {ids['refused']} (" in stale.stderr


def test_the_recorder_stores_the_rest_of_a_batch_the_store_refuses_one_of(
    store: Store,
    exchange_fields: Callable[..., dict[str, Any]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    _reject_analysis_of(store, "refused.test")
    knowledge = Knowledge(store)
    ids = _record(store, exchange_fields, knowledge.save_live)
    assert _analysed(store) == {
        ids["clean"]: ("completed", "ab", 10, 10),
        ids["wide"]: ("completed", "ab", -(2**62), None),
        ids["refused"]: (None, None, None, None),
        ids["clean2"]: ("completed", "ab", 10, 10),
    }
    [line] = [r.getMessage() for r in caplog.records if "not analysed" in r.getMessage()]
    assert f"exchange {ids['refused']} (" in line and "refused by trigger" in line
    assert not any("failed" in r.getMessage() for r in caplog.records)
