"""The ssetape store: one engine, migrations on open, and the read queries.

Writes on the recording path go through ``ssetape.storage.writer.Writer``;
this module only opens the database, keeps its schema current and answers the
queries the CLI, the replayer and the tests need.
"""

from __future__ import annotations

import importlib.resources
import os
import secrets
import sqlite3
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Self

import orjson
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, Select, create_engine, event, inspect, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError
from sqlalchemy.orm import sessionmaker
from sqlalchemy.pool import ConnectionPoolEntry, StaticPool

from ssetape.redactor import Redactor
from ssetape.storage.models import Chunk, Event, Exchange, Setting
from ssetape.vocabulary import ExchangeState

SQLITE_MAGIC = b"SQLite format 3\x00"

# Execution option read by the SQLite "begin" listener: "IMMEDIATE" takes the
# write lock up front, so a transaction never fails half-way on lock upgrade.
SQLITE_BEGIN = "ssetape_sqlite_begin"

# pg_advisory_xact_lock key serialising migrations of a fleet of recorders
# that start at once (the bytes of "ssetape1" as a signed 64-bit integer).
_MIGRATION_LOCK_KEY = int.from_bytes(b"ssetape1", "big", signed=True)


class StoreError(RuntimeError):
    """A store problem the user can act on; the message is one line saying what to do."""


def one_line(exc: BaseException) -> str:
    """The database's own message, first line only, without SQL or parameters."""
    orig = exc.orig if isinstance(exc, DBAPIError) else exc
    lines = [line.strip() for line in str(orig).splitlines() if line.strip()]
    msg = lines[0] if lines else type(orig).__name__
    return msg[:300]


def _json_dumps(obj: Any) -> str:
    return orjson.dumps(obj).decode()


def _sqlite_on_connect(dbapi_conn: Any, _record: ConnectionPoolEntry) -> None:
    # Hand transaction control to the "begin" listener below: pysqlite's own
    # implicit BEGIN is skipped for DDL and SELECT, which would leave
    # migrations non-transactional and make IMMEDIATE transactions impossible.
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    try:
        # busy_timeout first, so switching to WAL also waits for other processes.
        cur.execute("PRAGMA busy_timeout = 5000")
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


def alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(importlib.resources.files("ssetape.migrations")))
    return config


def _resolve_target(target: str) -> tuple[URL, Path | None]:
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


def _prepare_sqlite_file(path: Path, *, create: bool) -> None:
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


class Store:
    """One database: engine, sessionmaker, migrations and queries.

    Use ``Store.open(...)``; callers write with ``with store.Session.begin() as s:``.
    """

    def __init__(self, engine: Engine, url: URL, path: Path | None) -> None:
        self.engine = engine
        self.Session = sessionmaker(engine, expire_on_commit=False)
        self.url = url.render_as_string(hide_password=True)
        self.path = path
        self.is_sqlite = engine.dialect.name == "sqlite"
        self._password = url.password

    # -- opening ---------------------------------------------------------------

    @classmethod
    def open(cls, target: str, *, create: bool = True, migrate: bool = True) -> Self:
        """Open (and migrate) the store at an SQLAlchemy URL or an SQLite file path.

        ``migrate=False``: the caller knows it is migrated; nothing connects until first use
        (a recording process must start even while its database is down)."""
        url, path = _resolve_target(target)
        if path is not None:
            _prepare_sqlite_file(path, create=create)
        where = str(path) if path is not None else url.render_as_string(hide_password=True)
        try:
            engine = cls._create_engine(url)
        except ImportError as exc:
            raise StoreError(
                f"database driver for {url.drivername} is not installed ({exc.name}): "
                "pip install 'ssetape[postgres]'"
            ) from None
        except (ArgumentError, TypeError, ValueError) as exc:
            raise StoreError(f"invalid database URL {where}: {one_line(exc)}") from None
        store = cls(engine, url, path)
        if not migrate:
            return store
        try:
            store._migrate()
        except StoreError:
            engine.dispose()
            raise
        except DBAPIError as exc:
            engine.dispose()
            msg = store._redact(one_line(exc))
            if path is not None and "not a database" in msg:
                raise StoreError(f"{path} is not an SQLite database") from None
            verb = "open" if path is not None else "connect to"
            raise StoreError(f"cannot {verb} {where}: {msg}") from None
        except SQLAlchemyError as exc:
            engine.dispose()
            raise StoreError(f"cannot migrate {where}: {store._redact(one_line(exc))}") from None
        return store

    @staticmethod
    def _create_engine(url: URL) -> Engine:
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
            event.listen(engine, "connect", _sqlite_on_connect)
            event.listen(engine, "begin", _sqlite_on_begin)
            return engine
        if "connect_timeout" not in url.query:
            # A blackholed host would otherwise hang `ssetape` for minutes.
            common["connect_args"] = {"connect_timeout": 10}
        # pre_ping: after a server restart, stale pooled connections are
        # replaced instead of failing the writer's next batch.
        return create_engine(url, pool_pre_ping=True, **common)

    def _redact(self, msg: str) -> str:
        if self._password:
            msg = msg.replace(self._password, "***")
        return msg

    def _migrate(self) -> None:
        """Upgrade to head; refuse (without writing) a schema from a newer ssetape."""
        config = alembic_config()
        script = ScriptDirectory.from_config(config)
        head = script.get_current_head()
        known = {rev.revision for rev in script.walk_revisions()}

        def check(conn: Connection) -> bool:
            # Read the version table directly: MigrationContext would log two
            # INFO lines on every open.
            current: list[str] = []
            if inspect(conn).has_table("alembic_version"):
                current = list(
                    conn.execute(text("SELECT version_num FROM alembic_version")).scalars()
                )
            for rev in current:
                if rev not in known:
                    raise StoreError(
                        f"database schema revision {rev} is newer than this ssetape knows "
                        f"(head {head}): upgrade ssetape"
                    )
            return tuple(current) != (head,)

        # Look first without any lock: the common case is already at head, and
        # a read-only user must still be able to open the store.
        with self.engine.connect() as conn, conn.begin():
            if not check(conn):
                return

        engine = self.engine
        if self.is_sqlite:
            engine = engine.execution_options(**{SQLITE_BEGIN: "IMMEDIATE"})
        with engine.connect() as conn:
            raw = conn.connection.driver_connection if self.is_sqlite else None
            if raw is not None:
                # Batch migrations recreate tables; with foreign keys on, the
                # DROP of a parent table would cascade-delete every event. The
                # pragma is a no-op inside a transaction, so set it before BEGIN.
                raw.execute("PRAGMA foreign_keys = OFF")
            try:
                with conn.begin():
                    if not self.is_sqlite:
                        conn.execute(
                            text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK_KEY}
                        )
                    # Re-check under the lock: another process may have migrated.
                    if check(conn):
                        config.attributes["connection"] = conn
                        command.upgrade(config, "head")
            finally:
                if raw is not None:
                    raw.execute("PRAGMA foreign_keys = ON")

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({self.url!r})"

    # -- settings --------------------------------------------------------------

    def setting(self, key: str) -> str | None:
        with self.Session() as s:
            return s.scalar(select(Setting.value).where(Setting.key == key))

    def set_setting(self, key: str, value: str) -> None:
        with self.Session.begin() as s:
            if self.is_sqlite:
                sq = sqlite_insert(Setting).values(key=key, value=value)
                s.execute(
                    sq.on_conflict_do_update(index_elements=[Setting.key], set_={"value": value})
                )
            else:
                pg = pg_insert(Setting).values(key=key, value=value)
                s.execute(
                    pg.on_conflict_do_update(index_elements=[Setting.key], set_={"value": value})
                )

    def get_or_create_setting(self, key: str, factory: Callable[[], str]) -> str:
        """The setting's value, creating it with ``factory()`` if missing.

        Two processes racing both call the factory, but INSERT ... ON CONFLICT
        DO NOTHING keeps the first value and both return it.
        """
        existing = self.setting(key)
        if existing is not None:
            return existing
        value = factory()
        with self.Session.begin() as s:
            if self.is_sqlite:
                sq = sqlite_insert(Setting).values(key=key, value=value)
                s.execute(sq.on_conflict_do_nothing(index_elements=[Setting.key]))
            else:
                pg = pg_insert(Setting).values(key=key, value=value)
                s.execute(pg.on_conflict_do_nothing(index_elements=[Setting.key]))
        stored = self.setting(key)
        return value if stored is None else stored

    # -- redaction -------------------------------------------------------------

    def redactor(self, headers: Iterable[str] = (), fields: Iterable[str] = ()) -> Redactor:
        """The store's redactor: its key lives in the store, so masks are stable per store.

        Fields redacted by any recording into this store stay redacted for every later user
        of it (replay must mask incoming requests the same way to match them).
        """
        key = self.get_or_create_setting("redaction_key", lambda: secrets.token_hex(32))
        merged = self.add_redact_fields(fields)
        return Redactor(bytes.fromhex(key), headers=headers, fields=merged)

    def redact_fields(self) -> list[str]:
        """The JSON body fields redacted in this store (by any recording or import)."""
        fields: list[str] = orjson.loads(self.setting("redact_fields") or "[]")
        return fields

    def add_redact_fields(self, fields: Iterable[str]) -> list[str]:
        """Add ``fields`` to those redacted in this store; all of them, sorted."""
        known = self.redact_fields()
        merged = sorted(set(known) | {f.strip() for f in fields})
        if merged != known:
            self.set_setting("redact_fields", orjson.dumps(merged).decode())
        return merged

    # -- queries ---------------------------------------------------------------

    def exchanges(
        self,
        *,
        limit: int | None = None,
        order_desc: bool = True,
        where: Callable[[Select[Any]], Select[Any]] | None = None,
    ) -> list[Exchange]:
        """Exchanges by start time (newest first unless ``order_desc=False``).

        ``where`` narrows the query (see ssetape.storage.filters)."""
        if order_desc:
            order = (Exchange.started_at.desc(), Exchange.id.desc())
        else:
            order = (Exchange.started_at.asc(), Exchange.id.asc())
        stmt = select(Exchange).order_by(*order)
        if where is not None:
            stmt = where(stmt)
        if limit is not None:
            stmt = stmt.limit(limit)
        with self.Session() as s:
            return list(s.scalars(stmt))

    def exchange(self, id_or_uid: int | str) -> Exchange | None:
        """One exchange by id, or by uid (a str; a str of digits shorter than a uid is an id)."""
        if isinstance(id_or_uid, str) and (len(id_or_uid) == 32 or not id_or_uid.isdigit()):
            stmt = select(Exchange).where(Exchange.uid == id_or_uid)
        else:
            stmt = select(Exchange).where(Exchange.id == int(id_or_uid))
        with self.Session() as s:
            return s.scalar(stmt)

    def events(self, exchange_id: int) -> list[Event]:
        stmt = select(Event).where(Event.exchange_id == exchange_id).order_by(Event.seq)
        with self.Session() as s:
            return list(s.scalars(stmt))

    def chunks(self, exchange_id: int) -> list[Chunk]:
        stmt = select(Chunk).where(Chunk.exchange_id == exchange_id).order_by(Chunk.seq)
        with self.Session() as s:
            return list(s.scalars(stmt))

    def mark_interrupted(self, recorder: str | None = None) -> int:
        """Exchanges left in "recording" (by a recorder that died) become "interrupted"."""
        stmt = update(Exchange).where(Exchange.state == ExchangeState.RECORDING)
        stmt = stmt.values(state=ExchangeState.INTERRUPTED)
        if recorder is not None:
            stmt = stmt.where(Exchange.recorder == recorder)
        with self.engine.begin() as conn:
            return conn.execute(stmt).rowcount
