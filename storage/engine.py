"""How a store's engine is made: where the target is, the SQLite file, driver settings, deadlines.

A recording process opens its store with a ``deadline``: on PostgreSQL every statement and
lock wait is bounded by the server (``statement_timeout``, ``lock_timeout``), a connection
attempt and a silent network by the client (``connect_timeout``, TCP keepalives and
``tcp_user_timeout``); on SQLite the wait for another writer's lock is. A store that stalls is
then a failure the writer retries and counts, never a writer blocked for good.

Behind a pooler in transaction mode (PgBouncer), where each transaction may run on another
server session, nothing may rely on session state: a connection that finds it is not talking
to its server directly (see ``_pg_on_connect``) prepares no statements and sets the deadline's
timeouts per transaction (``SET LOCAL``); migrations take a transaction-level lock already.
"""

from __future__ import annotations

import math
import os
import re
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError
from sqlalchemy.pool import ConnectionPoolEntry, StaticPool

__all__ = [
    "SQLITE_BEGIN",
    "StoreError",
    "StoreUnwritable",
    "check_writable",
    "create_store_engine",
    "describe",
    "is_transient",
    "one_line",
    "prepare_sqlite_file",
    "resolve_target",
]

SQLITE_MAGIC = b"SQLite format 3\x00"
# Execution option read by the SQLite "begin" listener: "IMMEDIATE" takes the
# write lock up front, so a transaction never fails half-way on lock upgrade.
SQLITE_BEGIN = "ssetape_sqlite_begin"


class StoreError(RuntimeError):
    """A store problem the user can act on; the message is one line saying what to do."""


def one_line(exc: BaseException) -> str:
    """The database's own message, first line only, without SQL or parameters."""
    orig = exc.orig if isinstance(exc, DBAPIError) else exc
    lines = [line.strip() for line in str(orig).splitlines() if line.strip()]
    msg = lines[0] if lines else type(orig).__name__
    return msg[:300]


def describe(exc: BaseException) -> str:
    """The error's class (the driver's, not SQLAlchemy's wrapper) and its one line."""
    return f"{type(exc.orig if isinstance(exc, DBAPIError) else exc).__name__}: {one_line(exc)}"


# By PEP 249 class names, so raw driver errors count as well as SQLAlchemy's wrappers.
_TRANSIENT = frozenset(("OperationalError", "InterfaceError", "TimeoutError", "StoreUnwritable"))


def is_transient(exc: BaseException) -> bool:
    """Whether the store, not the statement, failed (down, locked, full, cut off): the same
    statement can succeed later, and no other one can now."""
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    return any(c.__name__ in _TRANSIENT for c in type(exc).__mro__)


def _json_dumps(obj: Any) -> str:
    return orjson.dumps(obj).decode()


def _sqlite_on_connect(busy_ms: int) -> Callable[[Any, ConnectionPoolEntry], None]:
    def on_connect(dbapi_conn: Any, _record: ConnectionPoolEntry) -> None:
        _sqlite_setup(dbapi_conn, busy_ms)

    return on_connect


def _sqlite_setup(dbapi_conn: Any, busy_ms: int) -> None:
    # Hand transaction control to the "begin" listener below: pysqlite's own
    # implicit BEGIN is skipped for DDL and SELECT, which would leave
    # migrations non-transactional and make IMMEDIATE transactions impossible.
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    try:
        # busy_timeout first, so switching to WAL also waits for other processes.
        cur.execute(f"PRAGMA busy_timeout = {busy_ms}")
        # On a new, empty store only (older ones: `ssetape prune --vacuum`), where it takes
        # effect (elsewhere it would still write the header): pages a prune frees are then
        # given back to the file system as it goes.
        if cur.execute("PRAGMA page_count").fetchone()[0] == 0:
            cur.execute("PRAGMA auto_vacuum = INCREMENTAL")
        if cur.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            _enable_wal(cur)
        cur.execute("PRAGMA synchronous = NORMAL")
        cur.execute("PRAGMA foreign_keys = ON")
        # The Writer checkpoints when it goes idle, so bursts do not pay for
        # it; this only bounds the WAL (64 MiB) under sustained load.
        cur.execute("PRAGMA wal_autocheckpoint = 16384")
        cur.execute("PRAGMA journal_size_limit = 67108864")
    finally:
        cur.close()


def _enable_wal(cur: Any) -> None:
    # Switching a fresh file to WAL can fail with "database is locked" at once,
    # without the busy handler, when several processes open it together.
    deadline = time.monotonic() + 5.0
    while True:
        try:
            cur.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _sqlite_on_begin(conn: Connection) -> None:
    mode = conn.get_execution_options().get(SQLITE_BEGIN, "DEFERRED")
    conn.exec_driver_sql(f"BEGIN {mode}")


def resolve_target(target: str) -> tuple[URL, Path | None]:
    """Turn a --db value (URL or file path) into a URL and, for SQLite files, the path."""
    if "://" not in target:
        path = Path(target).expanduser()
        return URL.create("sqlite+pysqlite", database=str(path)), path
    try:
        url = make_url(target)
    except ArgumentError:
        # Never echo the target: it may carry a password.
        raise StoreError(
            "invalid database URL (expected e.g. sqlite:///file.db or "
            "postgresql+psycopg://user@host/db)"
        ) from None
    if url.drivername in ("postgresql", "postgres"):
        # Only psycopg 3 is a dependency; SQLAlchemy would default to psycopg2.
        url = url.set(drivername="postgresql+psycopg")
    backend = url.get_backend_name()
    if backend == "sqlite":
        db = url.database or ""
        if db in ("", ":memory:") or db.startswith("file:"):
            return url, None
        return url, Path(db).expanduser()
    if backend != "postgresql":
        raise StoreError(
            f"unsupported database {backend!r}: use an SQLite file path or a "
            "postgresql+psycopg:// URL"
        )
    return url, None


def prepare_sqlite_file(path: Path, *, create: bool) -> None:
    """Check (or create, mode 0600) an SQLite file before SQLAlchemy touches it."""
    if path.is_dir():
        raise StoreError(f"{path} is a directory, not an SQLite database file (check --db)")
    if path.exists():
        try:
            with path.open("rb") as f:
                header = f.read(len(SQLITE_MAGIC))
        except PermissionError:
            raise StoreError(
                f"cannot read {path}: permission denied (check its permissions)"
            ) from None
        # An empty file is a valid empty database (SQLite initialises it).
        if header and header != SQLITE_MAGIC:
            raise StoreError(f"{path} is not an SQLite database")
        return
    if not create:
        raise StoreError(f"no ssetape database at {path} (record something first, or check --db)")
    parent = path.absolute().parent
    if not parent.is_dir():
        raise StoreError(
            f"cannot create {path}: directory {parent} does not exist (create it, or check --db)"
        )
    try:
        # Created here, not by SQLite, so recorded traffic is private from the
        # first byte; SQLite gives the -wal and -shm files the same mode.
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return  # another process created it first: fine
    except PermissionError:
        raise StoreError(
            f"cannot create {path}: directory {parent} is not writable "
            "(fix its permissions, or choose another --db)"
        ) from None
    except OSError as exc:
        raise StoreError(f"cannot create {path}: {exc.strerror} (check --db)") from None
    os.close(fd)


class StoreUnwritable(OSError):
    """The store file cannot be written now (read-only, immutable): not even tried."""


def check_writable(path: Path) -> None:
    """Raise StoreUnwritable unless the SQLite file and its WAL and shared-memory files may be
    written. Checked before every write: SQLite maps the shared-memory file, and a write to
    that mapping once the file is immutable (``chattr +i``) kills the process (SIGBUS)."""
    for name in (str(path), f"{path}-wal", f"{path}-shm"):
        if os.path.exists(name) and not os.access(name, os.W_OK):
            raise StoreUnwritable(f"{name} is read-only")


def create_store_engine(url: URL, deadline: float | None = None) -> Engine:
    """The engine of one store. ``deadline`` (seconds) bounds every statement, lock wait and
    connection attempt, as the recording process needs (see the module docstring); without it
    SQLite waits 5 s for a lock and PostgreSQL connections give up after 10 s."""
    common: dict[str, Any] = {
        "json_serializer": _json_dumps,
        "json_deserializer": orjson.loads,
        # Parameters are request/response contents: keep them out of
        # exception messages, which end up in logs.
        "hide_parameters": True,
    }
    if url.get_backend_name() == "sqlite":
        db = url.database or ""
        if db in ("", ":memory:"):
            # One shared connection, or every pooled connection would see
            # its own empty in-memory database.
            common["poolclass"] = StaticPool
            common["connect_args"] = {"check_same_thread": False}
        engine = create_engine(url, **common)
        busy_ms = round(1000 * deadline) if deadline is not None else 5000
        event.listen(engine, "connect", _sqlite_on_connect(busy_ms))
        event.listen(engine, "begin", _sqlite_on_begin)
        return engine
    common["connect_args"] = _pg_connect_args(url, deadline)
    # pre_ping: after a server restart, stale pooled connections are replaced instead of
    # failing the next statement. Not under a deadline: a ping on a silent network would
    # wait outside it, and the recording process retries a failed statement anyway.
    engine = create_engine(url, pool_pre_ping=deadline is None, **common)
    event.listen(engine, "connect", _pg_on_connect)
    local = _pg_local_timeouts(url, deadline)
    if local:
        theirs = str(url.query.get("options", "")) or None
        event.listen(engine, "do_connect", _PgStartup(theirs))
        event.listen(engine, "begin", _pg_on_begin(local))
    return engine


# Set in a pool record's info when its connection goes through a pooler (see _pg_on_connect).
_POOLED = "ssetape_pooled"


def _pg_on_connect(dbapi_conn: Any, record: ConnectionPoolEntry) -> None:
    # A pooler answers the client's startup with a cancel key of its own, not the server
    # session's: a pid that differs from the session's own is one between us. In transaction
    # mode each transaction may run on another server session, so psycopg's automatic
    # prepared statements (after 5 runs of a query) would be made on one and looked for on
    # another ("prepared statement _pg3_0 does not exist / already exists"): off there.
    # Direct connections keep them (executemany is ~1.5x faster prepared).
    autocommit = dbapi_conn.autocommit
    dbapi_conn.autocommit = True  # no transaction left open by the check
    try:
        row = dbapi_conn.execute("SELECT pg_backend_pid()").fetchone()
    finally:
        dbapi_conn.autocommit = autocommit
    if row is None or row[0] != dbapi_conn.info.backend_pid:
        dbapi_conn.prepare_threshold = None
        record.info[_POOLED] = True


class _PgStartup:
    """Connects with the deadline's timeouts in the startup packet; a pooler that refuses
    them (PgBouncer: "unsupported startup parameter") is asked again without, once for all
    (``_pg_on_begin`` then sets them per transaction)."""

    def __init__(self, theirs: str | None) -> None:
        self.theirs, self.refused = theirs, False

    def __call__(self, dialect: Any, _rec: Any, cargs: Any, cparams: dict[str, Any]) -> Any:
        if self.refused:
            return dialect.connect(*cargs, **self._without(cparams))
        try:
            return dialect.connect(*cargs, **cparams)
        except dialect.loaded_dbapi.OperationalError as exc:
            if "unsupported startup parameter" not in str(exc):
                raise
        self.refused = True
        return dialect.connect(*cargs, **self._without(cparams))

    def _without(self, cparams: dict[str, Any]) -> dict[str, Any]:
        params = {k: v for k, v in cparams.items() if k != "options"}
        if self.theirs is not None:  # the URL's own options are the user's to fix
            params["options"] = self.theirs
        return params


def _pg_on_begin(local: str) -> Callable[[Connection], None]:
    def on_begin(conn: Connection) -> None:
        # Through a pooler the startup packet's settings are refused or ignored, and a
        # session SET would stay on a server session that other clients get next: SET LOCAL
        # ends with the transaction, on whichever server session ran it.
        if conn.info.get(_POOLED):
            conn.exec_driver_sql(local)

    return on_begin


# A setting named by a URL's own options (-c name=value, --name=value): the user's wins.
_OPTION_NAME = re.compile(r"(?:-c\s*|--)([A-Za-z_.-]+)\s*=")


def _pg_local_timeouts(url: URL, deadline: float | None) -> str:
    """The deadline's timeouts as one SET LOCAL statement (\"\" without a deadline)."""
    if deadline is None:
        return ""
    named = {m.group(1).replace("-", "_") for m in _OPTION_NAME.finditer(
        str(url.query.get("options", "")))}  # fmt: skip
    settings = _pg_timeouts(deadline).items()
    return "; ".join(f"SET LOCAL {k} = {v}" for k, v in settings if k not in named)


def _pg_timeouts(deadline: float) -> dict[str, int]:
    ms = max(1, round(1000 * deadline))
    # A lock wait ends a little before the statement would: the error then names the lock.
    return {"statement_timeout": ms, "lock_timeout": max(1, ms * 4 // 5)}


def _pg_connect_args(url: URL, deadline: float | None) -> dict[str, Any]:
    args: dict[str, Any] = {}
    if "connect_timeout" not in url.query:
        # A blackholed host would otherwise hang `ssetape` for minutes.
        args["connect_timeout"] = 10 if deadline is None else max(2, math.ceil(deadline))
    if deadline is None:
        return args
    ms = max(1, round(1000 * deadline))
    options = [f"-c {k}={v}" for k, v in _pg_timeouts(deadline).items()]
    if "options" in url.query:  # the URL's own options come last and win
        options.append(str(url.query["options"]))
    args["options"] = " ".join(options)
    # A peer that stops answering (a dead route) is noticed within a few deadlines.
    args.update(keepalives=1, keepalives_idle=max(1, math.ceil(deadline)), keepalives_interval=1,
                keepalives_count=3, tcp_user_timeout=2 * ms)  # fmt: skip
    return args
