"""docs/deploy/pgbouncer.ini as documented (issue 40), run by the real PgBouncer with only
its addresses, database name and user list changed: a real `ssetape record` migrates and
records through it with a password (scram-sha-256, as written), and once the database takes
connections again after refusing them (as through a PostgreSQL restart), a transaction that
was waiting in the pooler goes through within seconds: the file lowers server_login_retry
from PgBouncer's 15 s, which held writes back for 15 s after a restart.

Needs Debian's ``pgbouncer`` and SSETAPE_TEST_PG_URL ($SSETAPE_TEST_PGBOUNCER: CI sets it on
one Python); skips in one line otherwise.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from ssetape.simulator.simulator import Simulator
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from tests.addons.stores import Recorders, pg_base, pg_database
from tests.addons.test_recorder import CHAT, raw_stream
from tests.storage.test_pgbouncer import _free_port, _listening, pgbouncer_executable

INI = Path(__file__).parents[2] / "docs" / "deploy" / "pgbouncer.ini"
PASSWORD = "a-secret-for-the-test"
DOWN_S = 2.5  # seconds the database refuses connections


@contextlib.contextmanager
def documented_pgbouncer(where: Path, database: str) -> Iterator[str]:
    """PgBouncer with the documented file in front of ``database``; yields the URL through it."""
    exe = pgbouncer_executable()
    server = make_url(pg_base())
    where.mkdir(parents=True, exist_ok=True)
    users = where / "userlist.txt"
    role = server.username or "postgres"
    users.write_text(f'"{role}" "{PASSWORD}"\n')
    port = _free_port()
    ini = INI.read_text()
    for documented, ours in (
        ("host=127.0.0.1 port=5432 dbname=ssetape",
         f"host={server.host or '127.0.0.1'} port={server.port or 5432} dbname={database}"),
        ("listen_addr = 0.0.0.0", "listen_addr = 127.0.0.1"),
        ("listen_port = 6432", f"listen_port = {port}"),
        ("/etc/pgbouncer/userlist.txt", str(users)),
    ):  # fmt: skip
        assert documented in ini, documented
        ini = ini.replace(documented, ours)
    conf = where / "pgbouncer.ini"
    conf.write_text(ini)
    as_user = ["-u", "nobody"] if os.geteuid() == 0 else []  # it refuses to run as root
    if as_user:
        try:
            pwd.getpwnam("nobody")
        except KeyError:
            pytest.skip("pgbouncer refuses root and there is no user nobody to run it as")
    log = where / "pgbouncer.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([exe, *as_user, str(conf)], stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + 10
        while proc.poll() is None and not _listening(port) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert proc.poll() is None and _listening(port), log.read_text()
        yield f"postgresql+psycopg://{role}:{PASSWORD}@127.0.0.1:{port}/ssetape"
    finally:
        proc.terminate()
        proc.wait(10)


def test_the_documented_pgbouncer_ini_records_and_resumes_writes_within_seconds(
    sim: Simulator, recorders: Recorders, tmp_path: Path
) -> None:
    pg_base()  # skips without a server
    with pg_database() as db, documented_pgbouncer(tmp_path / "pgb", db.name) as url:
        rec = recorders.start(url, "--mode", f"reverse:{sim.url}")
        status, _ = raw_stream(rec.url, "/v1/chat/completions", CHAT)
        assert status == 200
        assert rec.stop() == 0, rec.log.decode()
        with Store.open(url, create=False) as store:
            assert [x.state for x in Queries(store).exchanges()] == ["completed"]

        # The database refuses connections for a while (its sessions cut), as through a
        # restart; a transaction waits in the pooler meanwhile, as a recorder's write does.
        engine = create_engine(url, poolclass=NullPool)
        went: dict[str, object] = {}

        def write() -> None:
            try:
                with engine.begin() as conn:
                    conn.execute(text("SELECT 1"))
            except Exception as e:  # reported below
                went["error"] = e
            went["at"] = time.monotonic()

        waiting = threading.Thread(target=write)
        with db.down():
            waiting.start()
            time.sleep(DOWN_S)
        up = time.monotonic()
        waiting.join(60)
        engine.dispose()
    assert "error" not in went, went
    took = float(went["at"]) - up  # type: ignore[arg-type]
    # server_login_retry = 1: about a second; PgBouncer's default took 12-15 s here.
    assert took < 5.0, took
