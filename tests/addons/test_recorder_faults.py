"""Store faults that do not refuse, through a real `ssetape record`: a table locked past the
deadline, a network path to PostgreSQL that hangs (a relay the test freezes), connections
killed by the server, an SQLite file made immutable for a while, and one deleted.

Each time the clients get every byte on time, the recorder logs the fault once, records
again after it without a restart, and every event relayed is stored or counted lost, in the
exit line, the run rows and `ssetape stats --runs --json` alike (see
``test_recorder_failopen.stream_through_outage``).
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from ssetape.simulator.simulator import Simulator
from ssetape.storage.queries import Queries
from ssetape.storage.runs import Runs
from ssetape.storage.store import Store
from tests.addons.stores import PgDatabase, Recorders, pg_database
from tests.addons.test_recorder_failopen import Reader, body, stream_through_outage
from tests.conftest import SSETAPE
from tests.relay import Relay

TIMEOUT = ("--set", "ssetape_store_timeout=0.5")


@contextlib.contextmanager
def table_locked(url: str) -> Iterator[None]:
    """Another session holds the events table, as a migration or a long report would."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            conn.execute(text("LOCK TABLE events IN ACCESS EXCLUSIVE MODE"))
            yield
            conn.commit()
    finally:
        engine.dispose()


@contextlib.contextmanager
def connections_killed(pg: PgDatabase) -> Iterator[None]:
    """The server ends every connection to the database (pg_terminate_backend) once."""
    with pg.admin.connect() as conn:
        conn.execute(
            text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = :db AND pid <> pg_backend_pid()"
            ),
            {"db": pg.name},
        )
    yield


@contextlib.contextmanager
def immutable(db: str) -> Iterator[None]:
    files = [p for p in (db, f"{db}-wal", f"{db}-shm") if Path(p).exists()]
    if shutil.which("chattr") is None:
        pytest.skip("chattr is not installed")
    done = subprocess.run(["chattr", "+i", *files], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"chattr +i is not allowed here: {done.stderr.decode().strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", *files], check=True)


def test_postgresql_table_locked_past_the_deadline(sim: Simulator, recorders: Recorders) -> None:
    with pg_database() as pg:
        stream_through_outage(
            sim, recorders, pg.url, lambda: table_locked(pg.url), seconds=1.5, tokens=300,
            args=TIMEOUT,
        )  # fmt: skip


def test_postgresql_network_path_hangs(sim: Simulator, recorders: Recorders) -> None:
    with pg_database() as pg:
        Store.open(pg.url).close()  # migrated directly: the relay is the recorder's way
        parts = make_url(pg.url)
        relay = Relay((parts.host or "127.0.0.1", parts.port or 5432))
        try:
            via = parts.set(host="127.0.0.1", port=relay.port).render_as_string(False)
            stream_through_outage(
                sim, recorders, pg.url, relay.frozen, seconds=2.5, tokens=400,
                record_db=via, args=TIMEOUT,
            )  # fmt: skip
        finally:
            relay.close()


def test_postgresql_connections_killed_by_the_server(sim: Simulator, recorders: Recorders) -> None:
    with pg_database() as pg:
        stream_through_outage(
            sim, recorders, pg.url, lambda: connections_killed(pg), seconds=0.3, tokens=200,
            args=TIMEOUT, loses=None, surely_seen=False,
        )  # fmt: skip


def test_sqlite_store_made_immutable_for_a_while(
    sim: Simulator, recorders: Recorders, tmp_path: Path
) -> None:
    db = str(tmp_path / "tape.db")
    stream_through_outage(
        sim, recorders, db, lambda: immutable(db), seconds=1.2, tokens=300, args=TIMEOUT
    )


def test_postgresql_locked_until_after_the_recorder_stopped(
    sim: Simulator, recorders: Recorders
) -> None:
    """What the store never took by the end of the exit grace is counted lost, exactly."""
    with pg_database() as pg:
        proc = recorders.start(pg.url, "--mode", f"reverse:{sim.url}", *TIMEOUT)
        first = Reader(proc.url, body(0, 20))
        first.run()
        with table_locked(pg.url):
            readers = [Reader(proc.url, body(i, 40)) for i in range(1, 4)]
            for r in readers:
                r.run()
            t0 = time.monotonic()
            assert proc.stop(timeout=60) == 0, proc.log.decode()
            assert time.monotonic() - t0 < 30  # the exit grace bounds it
        log = proc.log.decode()
        m = re.search(r"ssetape: (\d+) events? in .* stored, (\d+) events? and", log)
        assert m, log
        stored_n, lost = int(m.group(1)), int(m.group(2))
        received = sum(len(r.arrivals) for r in [first, *readers])
        assert lost > 0 and stored_n + lost == received
        with Store.open(pg.url, create=False) as store:
            assert (
                sum(len(list(Queries(store).events(x.id))) for x in Queries(store).exchanges())
                == stored_n
            )
            [run] = Runs(store).all()
            assert (run.events_recorded, run.events_lost) == (stored_n, lost)


def test_sqlite_file_deleted_mid_session(
    sim: Simulator, recorders: Recorders, tmp_path: Path
) -> None:
    db = tmp_path / "tape.db"
    proc = recorders.start(str(db), "--mode", f"reverse:{sim.url}")
    gone = [Reader(proc.url, body(i, 20)) for i in range(2)]
    for r in gone:
        r.run()
    time.sleep(0.3)  # committed into the file that is about to go
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    kept = [Reader(proc.url, body(i, 20)) for i in range(2, 4)]
    for r in kept:
        r.run()
    assert proc.stop() == 0, proc.log.decode()
    log = proc.log.decode()
    for r in [*gone, *kept]:
        r.check()
    assert len(re.findall(r"tape.db was deleted while recording", log)) == 1, log
    m = re.search(r"ssetape: (\d+) events? in (\d+) exchanges? stored, (\d+) events? and", log)
    assert m, log
    stored_n, lost = int(m.group(1)), int(m.group(3))
    assert (stored_n, lost) == (
        sum(len(r.arrivals) for r in kept),
        sum(len(r.arrivals) for r in gone),
    )
    with Store.open(str(db), create=False) as store:  # a fresh file, with what came after
        rows = {x.request_body: x for x in Queries(store).exchanges()}
        assert set(rows) == {orjson.dumps(r.b) for r in kept}
        for r in kept:
            x = rows[orjson.dumps(r.b)]
            assert b"".join(e.raw for e in Queries(store).events(x.id)) == r.body
    runs = orjson.loads(
        subprocess.run(
            [SSETAPE, "stats", "--runs", "--json", "--db", str(db)], capture_output=True, check=True
        ).stdout
    )
    assert (runs["events_recorded"], runs["events_lost"]) == (stored_n, lost)
