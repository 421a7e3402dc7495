"""The store through PgBouncer in transaction pooling mode (issue 26), started by the test
like PostgreSQL itself: migrations, the Writer, the deadline, prune and the read paths.

Every pool has 2 server connections, so clients share server sessions: session state
(a SET, a prepared statement) left by one would be met by another. Needs Debian's
``pgbouncer`` and SSETAPE_TEST_PG_URL; each test gets a fresh database (PgBouncer takes no
``options``, so no search_path per schema), reached through the pooler.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import pwd
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from starlette.testclient import TestClient

from ssetape.records import EventRow
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store, alembic_config
from ssetape.storage.writer import Writer
from ssetape.web.app import create_app
from tests.addons.stores import pg_base, pg_database

POOL_SIZE = 2


POOLER_ENV = "SSETAPE_TEST_PGBOUNCER"


def pgbouncer_executable() -> str:
    """The pgbouncer the tests start: $SSETAPE_TEST_PGBOUNCER (CI sets it on one Python: the
    pooler tests run once)."""
    found = os.environ.get(POOLER_ENV)
    if not found:
        pytest.skip(f"{POOLER_ENV} not set: pooler tests need a pgbouncer (/usr/sbin/pgbouncer)")
    if shutil.which(found) is None:
        pytest.skip(f"{POOLER_ENV}={found} is not an executable (apt-get install pgbouncer)")
    return found


@dataclass
class Bouncer:
    port: int
    log: Path

    def url(self, direct: str) -> str:
        """``direct``'s database, through this pooler."""
        url = make_url(direct).set(host="127.0.0.1", port=self.port)
        return url.render_as_string(hide_password=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@contextlib.contextmanager
def pgbouncer(where: Path, *extra: str) -> Iterator[Bouncer]:
    """PgBouncer in transaction mode in front of the test server (any database name), on a
    free port, until the block ends; ``extra``: more [pgbouncer] settings."""
    exe = pgbouncer_executable()
    server = make_url(pg_base())
    where.mkdir(parents=True, exist_ok=True)
    users = where / "users.txt"
    # trust: clients are not asked; the server is logged into with this password.
    users.write_text(f'"{server.username or "postgres"}" "{server.password or ""}"\n')
    # It refuses to run as root: it then drops to nobody (after reading its files).
    as_user = ["-u", "nobody"] if os.geteuid() == 0 else []
    if as_user:
        try:
            pwd.getpwnam("nobody")
        except KeyError:
            pytest.skip("pgbouncer refuses root and there is no user nobody to run it as")
    for _ in range(3):  # a free port may be taken before pgbouncer binds it
        port = _free_port()
        ini = where / "pgbouncer.ini"
        ini.write_text(
            "[databases]\n"
            f"* = host={server.host or '127.0.0.1'} port={server.port or 5432}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {users}\npool_mode = transaction\n"
            f"default_pool_size = {POOL_SIZE}\nmax_client_conn = 500\n" + "".join(
                f"{line}\n" for line in extra)
        )  # fmt: skip
        log = where / "pgbouncer.log"
        with log.open("wb") as out:
            proc = subprocess.Popen([exe, *as_user, str(ini)], stdout=out, stderr=out)
        deadline = time.monotonic() + 10
        while proc.poll() is None and not _listening(port) and time.monotonic() < deadline:
            time.sleep(0.02)
        if proc.poll() is None and _listening(port):
            break
        proc.kill()
        proc.wait()
    else:
        raise AssertionError(f"pgbouncer did not start: {log.read_text()}")
    try:
        yield Bouncer(port, log)
    finally:
        proc.terminate()
        proc.wait(10)


@dataclass
class Pooled:
    url: str  # through the pooler
    direct: str  # the same database, straight to the server


@pytest.fixture(scope="module")
def bouncer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bouncer]:
    pg_base()  # skips without a server
    with pgbouncer(tmp_path_factory.mktemp("pgbouncer")) as b:
        yield b


@pytest.fixture
def pooled(bouncer: Bouncer) -> Iterator[Pooled]:
    with pg_database() as db:
        yield Pooled(bouncer.url(db.url), db.url)


def uid(i: int) -> str:
    return f"{i:032x}"


def record(
    store: Store,
    fields: Callable[..., dict[str, Any]],
    rows: Callable[..., list[EventRow]],
    n: int,
    *,
    deadline: float | None = None,
    tag: str = "",
    **over: Any,
) -> Writer:
    """``n`` exchanges of 3 events, each flushed as a batch of its own (n batches)."""
    w = Writer(store, flush_interval=0.001, deadline=deadline)
    w.start()
    try:
        for i in range(n):
            u = tag + uid(i)[len(tag) :]
            w.begin(u, **fields(**over))
            w.add_events(u, rows(0, 3, tag=tag))
            w.finish(u, state="completed")
            assert w.flush()
    finally:
        w.close()
    return w


def test_a_connection_through_the_pooler_is_told_apart_and_prepares_nothing(
    pooled: Pooled,
) -> None:
    with Store.open(pooled.url) as through, Store.open(pooled.direct) as direct:
        with through.engine.connect() as conn:
            assert conn.connection.driver_connection.prepare_threshold is None
        with direct.engine.connect() as conn:
            assert conn.connection.driver_connection.prepare_threshold == 5


def test_migrations_from_empty_through_the_pooler_several_at_once(pooled: Pooled) -> None:
    errors: list[BaseException] = []
    go = threading.Barrier(6)

    def open_one(i: int) -> None:
        try:
            go.wait()
            # Half as a recorder opens it (with a deadline: startup options refused).
            Store.open(pooled.url, deadline=5.0 if i % 2 else None).close()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_one, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    engine = create_engine(pooled.direct)
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SELECT version_num FROM alembic_version")).all() == [(head,)]
    finally:
        engine.dispose()


def test_writers_share_two_server_connections_past_the_prepare_threshold(
    pooled: Pooled,
    exchange_fields: Callable[..., dict[str, Any]],
    event_rows: Callable[..., list[EventRow]],
) -> None:
    """Three writers (one with the recorder's deadline), 25 batches each: the same
    statements run far more than 5 times on each client connection, over 2 server
    connections they share."""
    stores = [Store.open(pooled.url, deadline=d) for d in (5.0, None, None)]
    try:
        writers: list[Writer] = []

        def run(i: int) -> None:
            deadline = 5.0 if i == 0 else None
            writers.append(
                record(stores[i], exchange_fields, event_rows, 25, deadline=deadline, tag=f"{i}")
            )

        threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        for w in writers:
            s = w.stats
            assert (s.exchanges, s.events, s.failed_batches, s.last_error) == (25, 75, 0, None)
        with Store.open(pooled.direct) as direct:
            xs = Queries(direct).exchanges()
            assert len(xs) == 75 and {x.event_count for x in xs} == {3}
    finally:
        for s in stores:
            s.close()


@pytest.mark.parametrize("ignore_options", [False, True], ids=["refused", "ignored"])
def test_the_deadline_holds_per_transaction_and_never_stays_on_a_server_session(
    tmp_path: Path, ignore_options: bool
) -> None:
    """PgBouncer refuses the deadline's startup options (or, told to, ignores them): the
    timeouts are then set per transaction, and the server sessions other clients get next
    keep their own."""
    extra = ["ignore_startup_parameters = options"] if ignore_options else []
    with pgbouncer(tmp_path / "pgb", *extra) as b, pg_database() as db:
        url = b.url(db.url)
        with Store.open(url, deadline=0.5) as timed, Store.open(url) as plain:
            for _ in range(3):
                with timed.engine.connect() as conn:
                    got = [conn.exec_driver_sql(f"SHOW {k}").scalar()
                           for k in ("statement_timeout", "lock_timeout")]  # fmt: skip
                    assert got == ["500ms", "400ms"]
            with timed.engine.connect() as conn:
                t = time.monotonic()
                with pytest.raises(OperationalError) as caught:
                    conn.exec_driver_sql("SELECT pg_sleep(3)")
                assert getattr(caught.value.orig, "sqlstate", None) == "57014"
                assert time.monotonic() - t < 2.5
            # Both server sessions (pool of 2), held at once so each is seen.
            with plain.engine.connect() as a, plain.engine.connect() as c:
                seen = [conn.exec_driver_sql("SHOW statement_timeout").scalar() for conn in (a, c)]
                assert seen == ["0", "0"]


def test_list_stats_export_prune_and_the_web_list_through_the_pooler(
    pooled: Pooled,
    tmp_path: Path,
    exchange_fields: Callable[..., dict[str, Any]],
    event_rows: Callable[..., list[EventRow]],
) -> None:
    from ssetape.cli.main import main

    old = dt.datetime.now(dt.UTC) - dt.timedelta(days=10)
    with Store.open(pooled.url) as store:
        record(store, exchange_fields, event_rows, 8, tag="a", started_at=old)
        record(store, exchange_fields, event_rows, 4, tag="b")

    def cli(*args: str) -> str:
        r = CliRunner().invoke(main, [*args, "--db", pooled.url], catch_exceptions=False)
        assert r.exit_code == 0, r.output
        return r.stdout

    for _ in range(3):  # the same queries again and again, on shared server sessions
        assert len(orjson.loads(cli("list", "--json"))) == 12
        [group] = orjson.loads(cli("stats", "--json"))
        assert group["count"] == 12
    tape = tmp_path / "tape.jsonl"
    cli("export", "-o", str(tape))
    assert len(tape.read_bytes().splitlines()) >= 12
    dry = orjson.loads(cli("prune", "--older-than", "1d", "--dry-run", "--json"))
    assert dry["exchanges"] == 8
    done = orjson.loads(cli("prune", "--older-than", "1d", "--batch-rows", "3", "--json"))
    assert (done["exchanges"], done["events"]) == (8, 24) and done["batches"] > 5
    assert len(orjson.loads(cli("list", "--json"))) == 4
    with Store.open(pooled.url) as store, TestClient(create_app(Queries(store))) as client:
        for _ in range(7):
            page = client.get("/")
            assert page.status_code == 200 and page.text.count("<tr data-id=") == 4
