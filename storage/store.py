"""The ssetape store: one engine, migrations on open, settings and the redactor.

Writes on the recording path go through ``ssetape.storage.writer.Writer``; every read of
exchanges, events and chunks goes through ``ssetape.storage.queries.Queries`` (bounded
pages), never through the store itself.
"""

from __future__ import annotations

import importlib.resources
import secrets
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Self

import orjson
from sqlalchemy import Engine, inspect, select, text, update
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import URL, Connection
from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError
from sqlalchemy.orm import sessionmaker

from ssetape.redactor import Redactor
from ssetape.storage.engine import (
    SQLITE_BEGIN,
    StoreError,
    create_store_engine,
    one_line,
    prepare_sqlite_file,
    resolve_target,
)
from ssetape.storage.models import Exchange, Setting
from ssetape.vocabulary import ExchangeState, Fault

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

__all__ = ["SCHEMA_HEAD", "Store", "StoreError", "alembic_config"]

# The newest revision in migrations/versions (tests/storage/test_store.py checks it against
# Alembic's own reading). A store already there opens without importing Alembic: a third of a
# second of every command's start.
SCHEMA_HEAD = "0016"

# pg_advisory_xact_lock key serialising migrations of a fleet of recorders
# that start at once (the bytes of "ssetape1" as a signed 64-bit integer).
_MIGRATION_LOCK_KEY = int.from_bytes(b"ssetape1", "big", signed=True)
# Seconds a start waits for another session's migration lock, unless the session has a
# lock_timeout of its own (e.g. ?options=-c%20lock_timeout%3D5s in the URL).
MIGRATION_LOCK_WAIT = 60


def alembic_config() -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(importlib.resources.files("ssetape.migrations")))
    return config


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
        # For read-then-write transactions: IMMEDIATE on SQLite takes the write lock at BEGIN
        # (waiting busy_timeout), where a plain BEGIN fails at once on the lock upgrade when
        # another connection commits in between.
        self.writing_engine = (
            engine.execution_options(**{SQLITE_BEGIN: "IMMEDIATE"}) if self.is_sqlite else engine
        )
        self._password = url.password

    # -- opening ---------------------------------------------------------------

    @classmethod
    def open(
        cls,
        target: str,
        *,
        create: bool = True,
        migrate: bool = True,
        deadline: float | None = None,
    ) -> Self:
        """Open (and migrate) the store at an SQLAlchemy URL or an SQLite file path.

        ``migrate=False``: the caller knows it is migrated; nothing connects until first use
        (a recording process must start even while its database is down). ``deadline``:
        seconds any statement, lock wait or connection attempt may take (see
        ``storage.engine``)."""
        url, path = resolve_target(target)
        if path is not None:
            prepare_sqlite_file(path, create=create)
        store = cls._engine_for(url, path, deadline)
        if migrate:
            store._checked(store._migrate, "migrate")
        return store

    @classmethod
    def open_read_only(cls, target: str) -> Self:
        """Open a store only to read it: a hot standby, a read replica, a read-only role.

        The schema is checked, never migrated: one that is behind this ssetape's is a one-line
        error (migrate the primary, let the standby catch up). On PostgreSQL every transaction
        is read-only (``default_transaction_read_only``), so nothing here writes by mistake."""
        url, path = resolve_target(target)
        if path is not None:
            prepare_sqlite_file(path, create=False)
        else:
            mine = "-c default_transaction_read_only=on"
            own = url.query.get("options")
            own = own if isinstance(own, str) else " ".join(own or ())
            # The URL's own options come last, as in storage.engine.
            url = url.update_query_dict({"options": f"{mine} {own}".strip()})
        store = cls._engine_for(url, path, None)
        store._checked(store._check_read_only, "read")
        return store

    @classmethod
    def _engine_for(cls, url: URL, path: Path | None, deadline: float | None) -> Self:
        try:
            engine = create_store_engine(url, deadline)
        except ImportError as exc:
            raise StoreError(
                f"database driver for {url.drivername} is not installed ({exc.name}): "
                "pip install 'ssetape[postgres]'"
            ) from None
        except (ArgumentError, TypeError, ValueError) as exc:
            where = str(path) if path is not None else url.render_as_string(hide_password=True)
            raise StoreError(f"invalid database URL {where}: {one_line(exc)}") from None
        return cls(engine, url, path)

    def _checked(self, step: Callable[[], None], what: str) -> None:
        """Run an opening step; any failure is a one-line StoreError (engine disposed)."""
        where = str(self.path) if self.path is not None else self.url
        try:
            step()
        except StoreError:
            self.engine.dispose()
            raise
        except DBAPIError as exc:
            self.engine.dispose()
            msg = self._redact(one_line(exc))
            if self.path is not None and "not a database" in msg:
                raise StoreError(f"{self.path} is not an SQLite database") from None
            verb = "open" if self.path is not None else "connect to"
            raise StoreError(f"cannot {verb} {where}: {msg}") from None
        except SQLAlchemyError as exc:
            self.engine.dispose()
            raise StoreError(f"cannot {what} {where}: {self._redact(one_line(exc))}") from None

    def _redact(self, msg: str) -> str:
        if self._password:
            msg = msg.replace(self._password, "***")
        return msg

    @staticmethod
    def _current(conn: Connection) -> tuple[str, ...]:
        # Read the version table directly: MigrationContext would log two INFO lines on
        # every open.
        if not inspect(conn).has_table("alembic_version"):
            return ()
        return tuple(conn.execute(text("SELECT version_num FROM alembic_version")).scalars())

    @staticmethod
    def _schema(conn: Connection, script: ScriptDirectory) -> tuple[str, ...]:
        """The store's schema revisions; refuse (without writing) one from a newer ssetape."""
        current = Store._current(conn)
        known = {rev.revision for rev in script.walk_revisions()}
        for rev in current:
            if rev not in known:
                raise StoreError(
                    f"database schema revision {rev} is newer than this ssetape knows "
                    f"(head {script.get_current_head()}): upgrade ssetape"
                )
        return current

    def _check_read_only(self) -> None:
        """A store read only must be at this ssetape's head: it cannot be migrated here."""
        with self.engine.connect() as conn, conn.begin():
            if self._current(conn) == (SCHEMA_HEAD,):
                return
        from alembic.script import ScriptDirectory

        script = ScriptDirectory.from_config(alembic_config())
        head = script.get_current_head()
        with self.engine.connect() as conn, conn.begin():
            current = self._schema(conn, script)
        if current == (head,):
            return
        if not current:
            raise StoreError(
                f"{self.path or self.url} has no ssetape schema: open the primary with ssetape "
                "once (it creates the schema) and let the standby catch up"
            )
        raise StoreError(
            f"{self.path or self.url} is at schema revision {', '.join(current)}, behind this "
            f"ssetape's {head}: migrate the primary (e.g. ssetape list --db PRIMARY) and let "
            "the standby catch up"
        )

    def _migrate(self) -> None:
        """Upgrade to head; refuse (without writing) a schema from a newer ssetape."""
        self._upgrade()
        if self.is_sqlite:
            from ssetape.storage.text_index import TextIndex

            TextIndex.keep_at_open(self.engine, self.writing_engine)

    def _upgrade(self) -> None:
        with self.engine.connect() as conn, conn.begin():
            if self._current(conn) == (SCHEMA_HEAD,):
                return  # the common case, without Alembic
        from alembic import command
        from alembic.script import ScriptDirectory

        config = alembic_config()
        script = ScriptDirectory.from_config(config)
        head = script.get_current_head()

        def check(conn: Connection) -> bool:
            return self._schema(conn, script) != (head,)

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
                        self._lock_migrations(conn)
                    # Re-check under the lock: another process may have migrated.
                    if check(conn):
                        config.attributes["connection"] = conn
                        command.upgrade(config, "head")
            finally:
                if raw is not None:
                    raw.execute("PRAGMA foreign_keys = ON")

    def _lock_migrations(self, conn: Connection) -> None:
        """Take the migration lock for this transaction, waiting at most the session's own
        ``lock_timeout`` (URL options, role settings), else MIGRATION_LOCK_WAIT: a session that
        holds it for good (a stuck migration, a debugging psql) must not stall a start
        forever. The error names the holder."""
        wait = conn.exec_driver_sql("SHOW lock_timeout").scalar()
        if wait in (None, "0"):
            wait = f"{MIGRATION_LOCK_WAIT}s"
            conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{wait}'")
        try:
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK_KEY})
        except DBAPIError as exc:
            if getattr(exc.orig, "sqlstate", None) != "55P03":  # lock_not_available
                raise
            raise StoreError(
                f"cannot migrate {self.url}: waited {wait} for its migration lock, held by "
                f"another session ({self._lock_holder()}); end that session or try again"
            ) from None

    def _lock_holder(self) -> str:
        """Who holds the migration lock, as pg_stat_activity names them (best effort)."""
        key = _MIGRATION_LOCK_KEY & 0xFFFF_FFFF_FFFF_FFFF  # as pg_locks splits it: two oids
        query = text(
            "SELECT a.pid, a.application_name, a.client_addr, a.client_port, a.usename "
            "FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
            "AND l.classid::bigint = :hi AND l.objid::bigint = :lo "
            "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        )
        try:
            with self.engine.connect() as conn:
                row = conn.execute(query, {"hi": key >> 32, "lo": key & 0xFFFF_FFFF}).first()
        except DBAPIError as exc:
            return f"holder unknown: {self._redact(one_line(exc))}"
        if row is None:
            return "holder unknown: it has just let go"
        pid, app, addr, port, user = row
        client = "local socket" if addr is None else f"{addr}:{port}"
        return f"pid {pid}, application_name {app!r}, user {user!r}, client {client}"

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
                # Imported here: PostgreSQL's dialect (all its drivers' modules) is 40 ms of the
                # start of every command on an SQLite store, which loads only its own.
                from sqlalchemy.dialects.postgresql import insert as pg_insert

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
                from sqlalchemy.dialects.postgresql import insert as pg_insert

                pg = pg_insert(Setting).values(key=key, value=value)
                s.execute(pg.on_conflict_do_nothing(index_elements=[Setting.key]))
        stored = self.setting(key)
        return value if stored is None else stored

    # -- redaction -------------------------------------------------------------

    def redactor(
        self, headers: Iterable[str] = (), fields: Iterable[str] = (), *, keep: bool = True
    ) -> Redactor:
        """The store's redactor: its key lives in the store, so masks are stable per store.

        Fields redacted by any recording into this store stay redacted for every later user
        of it (replay must mask incoming requests the same way to match them); ``keep=False``
        leaves that to the caller (an import adds them only once it has committed).
        """
        key = self.get_or_create_setting("redaction_key", lambda: secrets.token_hex(32))
        if keep:
            merged = self.add_redact_fields(fields)
        else:
            merged = sorted(set(self.redact_fields()) | {f.strip() for f in fields})
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

    # -- writes ----------------------------------------------------------------

    def mark_interrupted(self, recorder: str | None = None) -> int:
        """Exchanges left in "recording" (by a recorder that died) become "interrupted"."""
        stmt = update(Exchange).where(Exchange.state == ExchangeState.RECORDING)
        stmt = stmt.values(state=ExchangeState.INTERRUPTED, fault=Fault.SSETAPE)
        if recorder is not None:
            stmt = stmt.where(Exchange.recorder == recorder)
        with self.engine.begin() as conn:
            return conn.execute(stmt).rowcount
