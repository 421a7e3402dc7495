"""The record path on PostgreSQL through the command line: record, list, show, replay,
stats, export and import.

~12 s: four real `ssetape` processes, each ~2.5 s of imports on this machine.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import orjson

from ssetape.simulator.simulator import Simulator
from tests.addons.stores import Recorders, pg_schema
from tests.addons.test_recorder import CHAT, raw_stream
from tests.conftest import SSETAPE, start_ssetape
from tests.upstreams import fixed_upstream


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
        assert (group["count"], group["errors"]) == (1, 0)
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
            [x] = store.exchanges()
            events = store.events(x.id)
            assert (x.state, x.error, x.gap_seq) == ("completed", None, None)
            assert [e.raw for e in events] == chunks
            assert events[0].data == '{"t":"a\ufffdb"}'
        assert replayed(url, upstream, tmp_path, confdir) == (200, recorded)
