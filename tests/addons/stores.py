"""Real stores and real recorder processes for the crash, fail-open and fleet tests.

PostgreSQL needs SSETAPE_TEST_PG_URL (see tests/storage/conftest.py); each test gets a
schema or a database of its own, dropped afterwards. Nothing here stops the shared server.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from tests.conftest import Proc, start_ssetape

PG_ENV = "SSETAPE_TEST_PG_URL"


def pg_base() -> str:
    base = os.environ.get(PG_ENV)
    if not base:
        pytest.skip(f"{PG_ENV} not set: PostgreSQL tests need a server")
    return base


def _terminate(admin: Engine, where: str, value: str) -> None:
    with admin.connect() as conn:
        conn.execute(
            text(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE {where} = :v"),
            {"v": value},
        )


@contextlib.contextmanager
def pg_schema() -> Iterator[str]:
    """A URL whose connections use a fresh schema of the test database."""
    base = pg_base()
    schema = f"ssetape_test_{secrets.token_hex(6)}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
        url = make_url(base).update_query_dict(
            {"options": f"-csearch_path={schema}", "application_name": schema}
        )
        yield url.render_as_string(hide_password=False)
    finally:
        _terminate(admin, "application_name", schema)
        with admin.connect() as conn:
            conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        admin.dispose()


@dataclass
class PgDatabase:
    url: str
    name: str
    admin: Engine

    @contextlib.contextmanager
    def down(self) -> Iterator[None]:
        """The database refuses every connection and drops the open ones, as a stopped
        server would for its clients; the shared server itself keeps running."""
        with self.admin.connect() as conn:
            conn.execute(text(f'ALTER DATABASE "{self.name}" ALLOW_CONNECTIONS false'))
        _terminate(self.admin, "datname", self.name)
        try:
            yield
        finally:
            with self.admin.connect() as conn:
                conn.execute(text(f'ALTER DATABASE "{self.name}" ALLOW_CONNECTIONS true'))


@contextlib.contextmanager
def pg_database() -> Iterator[PgDatabase]:
    """A fresh database on the test server, dropped afterwards."""
    base = pg_base()
    name = f"ssetape_test_{secrets.token_hex(6)}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        url = make_url(base).set(database=name).render_as_string(hide_password=False)
        yield PgDatabase(url, name, admin)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@contextlib.contextmanager
def store_target(kind: str, tmp_path: Path) -> Iterator[str]:
    """A --db value: an SQLite file, or a PostgreSQL URL with a schema of its own."""
    if kind == "sqlite":
        yield str(tmp_path / "tape.db")
        return
    with pg_schema() as url:
        yield url


class Recorders:
    """Starts real `ssetape record` processes; whatever is still running at the end is
    stopped with SIGTERM and must exit 0 (killed ones are the test's business)."""

    def __init__(self, tmp_path: Path, confdir: Path) -> None:
        self.tmp_path = tmp_path
        self.confdir = confdir
        self.started: list[Proc] = []

    def start(self, db: str, *args: str, env: dict[str, str] | None = None) -> Proc:
        argv = ["record", "--db", db, "--port", "0", "--confdir", str(self.confdir), *args]
        # `db` is only the working directory's anchor: a URL has no folder.
        anchor = db if "://" not in db else str(self.tmp_path / "pg")
        proc = start_ssetape(argv, db=anchor, env=env)
        proc.db = db
        self.started.append(proc)
        return proc

    def stop_all(self) -> None:
        for p in self.started:
            if p.proc.poll() is None:
                assert p.stop() == 0, p.log.decode()


def kill9(proc: Proc) -> float:
    """SIGKILL, as `kill -9` does; returns when it was sent (time.time())."""
    t = time.time()
    proc.proc.send_signal(signal.SIGKILL)
    proc.proc.wait(10)
    return t


def recording_process(proc: Proc) -> int:
    """The pid of a running `ssetape record`'s recording process (its only child)."""
    me = str(proc.proc.pid)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            # "pid (comm) state ppid ...": comm may hold spaces, so split after it.
            if stat.read_text().rpartition(")")[2].split()[1] == me:
                return int(stat.parent.name)
    raise AssertionError(f"ssetape record {me} has no recording process")


def kill9_all(proc: Proc) -> float:
    """SIGKILL to the proxy and its recording process at once, as the OOM killer or
    `kill -9 -PGID` would: the recording process is frozen first so that it cannot save
    anything after the proxy's end."""
    child = recording_process(proc)
    os.kill(child, signal.SIGSTOP)
    t = kill9(proc)
    os.kill(child, signal.SIGKILL)
    return t


def wait_for(check: Callable[[], Any], timeout: float = 10.0, every: float = 0.05) -> Any:
    """Poll ``check`` until it returns something truthy; that value, or fail."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            assert value, f"still false after {timeout} s"
            return value
        time.sleep(every)
