"""The record path on PostgreSQL through the command line: record, list, show, replay,
stats, export and import.

~12 s: four real `ssetape` processes, each ~2.5 s of imports on this machine.
"""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import text

from ssetape.analysis.knowledge import ANALYSIS_VERSION
from ssetape.simulator.simulator import Simulator
from ssetape.storage.queries import Queries
from tests.addons.stores import Recorders, pg_schema
from tests.addons.test_recorder import CHAT, raw_stream
from tests.conftest import SSETAPE, start_ssetape
from tests.upstreams import fixed_upstream, read_request, serving


def replayed(url: str, upstream: str, tmp_path: Path, confdir: Path) -> tuple[int, bytes]:
    """Status and body of the chat request replayed by `ssetape replay` from ``url``."""
    rep = start_ssetape(
        ["replay", "--db", url, "--port", "0", "--confdir", str(confdir), "--mode",
         f"reverse:{upstream}"],
        db=str(tmp_path / "pg"),
    )  # fmt: skip
    try:
        return raw_stream(rep.url, "/v1/chat/completions", CHAT)
    finally:
        assert rep.stop() == 0, rep.log.decode()


def test_record_list_show_replay_on_postgresql(
    sim: Simulator, recorders: Recorders, tmp_path: Path, confdir: Path
) -> None:
    with pg_schema() as url:
        rec = recorders.start(url, "--mode", f"reverse:{sim.url}")
        _, direct = raw_stream(sim.url, "/v1/chat/completions", CHAT)
        _, recorded = raw_stream(rec.url, "/v1/chat/completions", CHAT)
        assert recorded == direct
        assert rec.stop() == 0, rec.log.decode()

        listing = subprocess.run(
            [SSETAPE, "list", "--db", url, "--json"], capture_output=True, check=True
        )
        [row] = orjson.loads(listing.stdout)
        assert (row["state"], row["is_stream"]) == ("completed", True)
        shown = subprocess.run(
            [SSETAPE, "show", "--db", url, str(row["id"]), "--json"],
            capture_output=True,
            check=True,
        )
        detail = orjson.loads(shown.stdout)
        assert len(detail["events"]) == row["event_count"] > 0

        # The upstream is not needed: replay serves the stream from PostgreSQL.
        assert replayed(url, sim.url, tmp_path, confdir) == (200, direct)

        # stats, export and import on PostgreSQL too (in process: no mitmproxy needed).
        from click.testing import CliRunner

        from ssetape.cli.main import main

        def cli(*args: str) -> str:
            r = CliRunner().invoke(main, list(args), catch_exceptions=False)
            assert r.exit_code == 0, r.output
            return r.stdout

        [group] = orjson.loads(cli("stats", "--db", url, "--json"))
        assert (group["count"], group["failed"]) == (1, 0)
        assert detail["outcome"] == "completed" and detail["api"] == "chat_completions"
        tape = tmp_path / "pg.jsonl"
        cli("export", "--db", url, "-o", str(tape))
        assert tape.stat().st_mode & 0o777 == 0o600
        with pg_schema() as other:
            cli("import", str(tape), "--db", other)
            [copy] = orjson.loads(cli("list", "--db", other, "--json"))
            assert {k: copy[k] for k in ("url", "event_count", "outcome", "usage")} == {
                k: row[k] for k in ("url", "event_count", "outcome", "usage")
            }


def test_a_stream_with_nul_bytes_is_stored_whole_on_postgresql_and_replays_exactly(
    recorders: Recorders, tmp_path: Path, confdir: Path
) -> None:
    """PostgreSQL text cannot hold NUL: the event's text columns get U+FFFD, its raw bytes
    stay exact, and replay sends those."""
    chunks = [b'data: {"t":"a\x00b"}\n\n', b"event: x\x00y\ndata: 2\n\n", b"data: [DONE]\n\n"]
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
    with pg_schema() as url, fixed_upstream(head, chunks) as upstream:
        rec = recorders.start(url, "--mode", f"reverse:{upstream}")
        _, recorded = raw_stream(rec.url, "/v1/chat/completions", CHAT)
        assert recorded == b"".join(chunks)
        assert rec.stop() == 0, rec.log.decode()
        assert b"none lost" in rec.log
        from ssetape.storage.store import Store

        with Store.open(url, create=False) as store:
            [x] = Queries(store).exchanges()
            events = list(Queries(store).events(x.id))
            assert (x.state, x.error, x.gap_seq) == ("completed", None, None)
            assert [e.raw for e in events] == chunks
            assert events[0].data == '{"t":"a\ufffdb"}'
        assert replayed(url, upstream, tmp_path, confdir) == (200, recorded)


def _chat_stream(content: bytes, prompt_tokens: int = 3) -> bytes:
    """A whole chat completions stream whose one delta is the JSON string ``content``."""
    head = b'{"id":"c","object":"chat.completion.chunk","model":"m1","choices":'
    usage = b'"usage":{"prompt_tokens":%d,"completion_tokens":2,"total_tokens":5}' % prompt_tokens
    return b"".join(
        [
            b'data: %s[{"index":0,"delta":{"content":%s},"finish_reason":null}]}\n\n'
            % (head, content),
            b'data: %s[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n' % head,
            b"data: %s[],%s}\n\n" % (head, usage),
            b"data: [DONE]\n\n",
        ]
    )


def test_a_nul_escape_costs_only_its_own_text_on_postgresql(
    recorders: Recorders, tmp_path: Path
) -> None:
    """`"a\\u0000b"` (the JSON escape, no NUL byte on the wire) in one of five streams that
    finish together, so one batch, and a token count PostgreSQL's INTEGER cannot hold in
    another: all five keep their analysis (U+FFFD for the NUL, the count unknown), and
    `reindex` and `reindex --stale` redo it without an error."""
    bad = _chat_stream(b'"a\\u0000b"')
    assert b"\0" not in bad
    together = threading.Barrier(5, timeout=20)

    def serve(conn: socket.socket) -> None:
        with conn:
            got = read_request(conn, b"")
            if got is None:
                return
            n = got[0]["x-n"].encode()
            huge = 99_999_999_999 if n == b"4" else 3
            body = bad if n == b"0" else _chat_stream(b'"ok %s"' % n, huge)
            together.wait()  # all five finish at once: one writer batch
            conn.sendall(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"content-length: %d\r\n\r\n%s" % (len(body), body)
            )

    with pg_schema() as url, serving(serve) as upstream:
        rec = recorders.start(url, "--mode", f"reverse:{upstream}")

        def one(n: int) -> tuple[int, bytes]:
            return raw_stream(rec.url, "/v1/chat/completions", CHAT, headers={"x-n": str(n)})

        with ThreadPoolExecutor(5) as pool:
            got = list(pool.map(one, range(5)))
        assert [status for status, _ in got] == [200] * 5
        assert rec.stop() == 0, rec.log.decode()
        assert b"none lost" in rec.log, rec.log.decode()

        from ssetape.storage.store import Store

        def knowledge() -> list[tuple[Any, ...]]:
            with Store.open(url, create=False) as store:
                return sorted(  # by text: each stream's is its own
                    (
                        x.output_text,
                        x.model,
                        x.outcome,
                        x.input_tokens,
                        x.total_tokens,
                        x.analysis_version,
                    )
                    for x in Queries(store).exchanges()
                )

        texts = ["a\ufffdb", *(f"ok {n}" for n in range(1, 5))]
        want = sorted(
            (t, "m1", "completed", None if t == "ok 4" else 3, 5, ANALYSIS_VERSION) for t in texts
        )
        assert knowledge() == want
        for args in (["reindex", "--stale"], ["reindex"]):
            with Store.open(url, create=False) as store, store.engine.begin() as conn:
                conn.execute(text("UPDATE exchanges SET analysis_version = NULL"))  # all stale
            done = subprocess.run([SSETAPE, *args, "--db", url], capture_output=True)
            assert done.returncode == 0, done.stderr.decode()
            assert b"reindexed 5 exchange(s)" in done.stdout
            assert knowledge() == want


def test_a_held_migration_lock_stops_record_in_bounded_time_naming_its_holder(
    tmp_path: Path, confdir: Path
) -> None:
    """Another session holds the migration lock for good (a stuck migration, a debugging
    psql): `ssetape record` on a store to migrate gives up after the wait, in one line that
    says who holds it, instead of waiting forever."""
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url

    from ssetape.storage.store import _MIGRATION_LOCK_KEY

    with pg_schema() as url:
        holder = create_engine(
            make_url(url).update_query_dict({"application_name": "lock-holder-test"}),
            isolation_level="AUTOCOMMIT",
        )
        # The session's own lock_timeout bounds the wait (without one: 60 s).
        options = make_url(url).query["options"]
        short = make_url(url).update_query_dict({"options": f"{options} -c lock_timeout=1500"})
        try:
            with holder.connect() as conn:
                conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _MIGRATION_LOCK_KEY})
                pid = conn.execute(text("SELECT pg_backend_pid()")).scalar()
                t0 = time.monotonic()
                done = subprocess.run(
                    [SSETAPE, "record", "--db", short.render_as_string(hide_password=False),
                     "--port", "0", "--confdir", str(confdir)],
                    capture_output=True, text=True, timeout=60, cwd=tmp_path,
                )  # fmt: skip
                took = time.monotonic() - t0
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _MIGRATION_LOCK_KEY})
        finally:
            holder.dispose()
        out = done.stdout + done.stderr
        assert done.returncode != 0, out
        assert "Traceback" not in out
        [line] = [x for x in out.splitlines() if "migration lock" in x]
        assert f"pid {pid}" in line and "'lock-holder-test'" in line, line
        assert took < 30, took  # the wait was 1.5 s; a start costs a few
