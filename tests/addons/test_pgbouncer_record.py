"""A real `ssetape record` whose --db is PgBouncer in transaction mode (issue 26), then
`ssetape list` as a user runs it, stats, export, prune and the web list through the pooler.

~6 s: two real `ssetape` processes (record, list). Skips without pgbouncer or SSETAPE_TEST_PG_URL.
"""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import orjson
from click.testing import CliRunner
from starlette.testclient import TestClient

from ssetape.simulator.simulator import Simulator
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from ssetape.web.app import create_app
from tests.addons.stores import Recorders, pg_base, pg_database
from tests.addons.test_recorder import CHAT, raw_stream
from tests.conftest import SSETAPE
from tests.storage.test_pgbouncer import pgbouncer

STREAMS = 12  # past psycopg's prepare threshold (5) in the recording process


def test_record_then_list_stats_export_prune_and_web_through_pgbouncer(
    sim: Simulator, recorders: Recorders, tmp_path: Path
) -> None:
    pg_base()  # skips without a server
    with pgbouncer(tmp_path / "pgb") as bouncer, pg_database() as db:
        url = bouncer.url(db.url)
        rec = recorders.start(url, "--mode", f"reverse:{sim.url}")
        _, direct = raw_stream(sim.url, "/v1/chat/completions", CHAT)
        with ThreadPoolExecutor(4) as pool:  # clients at once: server sessions are shared
            got = list(
                pool.map(
                    lambda _: raw_stream(rec.url, "/v1/chat/completions", CHAT), range(STREAMS)
                )
            )
        assert all(body == direct for _, body in got)
        assert rec.stop() == 0, rec.log.decode()
        assert b"none lost" in rec.log, rec.log.decode()

        listing = subprocess.run(
            [SSETAPE, "list", "--db", url, "--json"], capture_output=True, check=True
        )
        rows = orjson.loads(listing.stdout)
        assert len(rows) == STREAMS
        assert {(r["state"], r["is_stream"]) for r in rows} == {("completed", True)}

        from ssetape.cli.main import main

        def cli(*args: str) -> str:
            r = CliRunner().invoke(main, [*args, "--db", url], catch_exceptions=False)
            assert r.exit_code == 0, r.output
            return r.stdout

        [group] = orjson.loads(cli("stats", "--json"))
        assert (group["count"], group["failed"]) == (STREAMS, 0)
        tape = tmp_path / "tape.jsonl"
        cli("export", "-o", str(tape))
        assert tape.stat().st_size > 0
        with Store.open(url) as store, TestClient(create_app(Queries(store))) as client:
            page = client.get("/")
            assert page.status_code == 200 and page.text.count("<tr data-id=") == STREAMS
        # A cut in the future takes every exchange, a few per transaction.
        report = orjson.loads(cli("prune", "--older-than", "2999-01-01", "--json",
                                  "--batch-rows", "10"))  # fmt: skip
        assert report["exchanges"] == STREAMS and report["batches"] > 1
        assert orjson.loads(cli("list", "--json")) == []
