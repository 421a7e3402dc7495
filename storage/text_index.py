"""SQLite's index of `--grep`: an FTS5 trigram table over exchanges' output text, path and
request text (the prompt, migration 0015).

PostgreSQL indexes `--grep` with ``pg_trgm`` (migration 0011). SQLite's ``LIKE '%word%'``
can use no B-tree index, so a word no exchange holds read every exchange (1.8 s a million).
FTS5's trigram tokenizer (SQLite 3.34+) indexes every three characters of each column and
answers a plain ``LIKE`` from that index (``storage.narrowing`` asks it). The table holds no
copy of the text (``content='exchanges'``) and no positions (``detail=none``): the query
checks every row it returns with the filter's own ``LIKE``.

Triggers keep it current on every write, whoever writes: the recorder, ``prune``,
``reindex``, ``redact``. A SQLite without FTS5 or the trigram tokenizer cannot run them, and
every insert into ``exchanges`` would then fail: a store moved to such a machine (an older
distribution's SQLite) has them dropped when it opens, with one warning, and `--grep` reads
every exchange there. Where they can run again, the next open puts them back and rebuilds
the index.

A later migration that rebuilds ``exchanges`` (Alembic's batch mode on SQLite) drops these
triggers with the old table: it must call :meth:`TextIndex.create` after. One that changes
the columns indexed drops the table and makes it anew; a store it could not do that for (its
SQLite had no FTS5: the table cannot be dropped without it) keeps the old table, which
readers do not ask, and the first open by a SQLite that can makes it anew.
"""

from __future__ import annotations

import logging
import sqlite3

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError

__all__ = ["TextIndex"]

log = logging.getLogger("ssetape.storage")

TABLE = "exchanges_text"
COLUMNS = ("output_text", "path", "request_text")
# What migration 0012 indexed, before 0015 added the request's text: 0012 makes this (the
# exchanges it rebuilds from have no request_text yet), and 0015's downgrade makes it again.
COLUMNS_0012 = ("output_text", "path")


def triggers(columns: tuple[str, ...] = COLUMNS) -> dict[str, str]:
    """The triggers that keep an index of ``columns`` current, by name."""
    names = ", ".join(columns)
    new = ", ".join(f"new.{c}" for c in columns)
    old = ", ".join(f"old.{c}" for c in columns)
    insert = f"INSERT INTO {TABLE}(rowid, {names}) VALUES (new.id, {new})"
    delete = f"INSERT INTO {TABLE}({TABLE}, rowid, {names}) VALUES ('delete', old.id, {old})"
    return {
        f"{TABLE}_ai": f"AFTER INSERT ON exchanges BEGIN {insert}; END",
        f"{TABLE}_ad": f"AFTER DELETE ON exchanges BEGIN {delete}; END",
        # Only when an indexed column is written: the recorder updates an exchange's other
        # columns many times, its texts once, at the end (its analysis).
        f"{TABLE}_au": f"AFTER UPDATE OF {names} ON exchanges BEGIN {delete}; {insert}; END",
    }


TRIGGERS = triggers()


# What SQLite says when it lacks FTS5 or its trigram tokenizer (another error, a busy or
# failing disk, says nothing of the library: the index is then left as it is).
_UNABLE = ("no such module", "no such tokenizer")


def _why(e: DBAPIError) -> str:
    return str(e.orig).splitlines()[0] if e.orig is not None else str(e)


def _current(sql: str | None) -> bool:
    """Whether the table ``sql`` made indexes the columns readers ask it for (COLUMNS)."""
    return sql is not None and f"fts5({', '.join(COLUMNS)}," in sql


class TextIndex:
    """Making, checking and mending a SQLite store's text index (see the module's text)."""

    @staticmethod
    def create(conn: Connection, columns: tuple[str, ...] = COLUMNS) -> bool:
        """Make the table of ``columns`` and its triggers and index what the store holds;
        False (and one warning) when this SQLite cannot."""
        try:
            with conn.begin_nested():
                conn.exec_driver_sql(
                    f"CREATE VIRTUAL TABLE IF NOT EXISTS {TABLE} USING fts5({', '.join(columns)}, "
                    "content='exchanges', content_rowid='id', tokenize='trigram', detail=none)"
                )
        except DBAPIError as e:
            log.warning(
                "ssetape: SQLite %s has no FTS5 trigram tokenizer (%s): --grep reads every "
                "exchange",
                sqlite3.sqlite_version,
                _why(e),
            )
            return False
        for name, body in triggers(columns).items():
            conn.exec_driver_sql(f"CREATE TRIGGER IF NOT EXISTS {name} {body}")
        # A minute or so for a million exchanges with long texts (BENCHMARKS.md).
        conn.exec_driver_sql(f"INSERT INTO {TABLE}({TABLE}) VALUES ('rebuild')")
        return True

    @staticmethod
    def drop(conn: Connection) -> bool:
        """Drop the triggers and the table; whether the table is gone (a SQLite without FTS5
        cannot drop it, and leaves it: it is read by nobody, and written by no trigger)."""
        for name in TRIGGERS:
            conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {name}")
        try:
            with conn.begin_nested():
                conn.exec_driver_sql(f"DROP TABLE IF EXISTS {TABLE}")
        except DBAPIError as e:
            if not any(m in _why(e) for m in _UNABLE):
                raise
            return False
        return True

    @staticmethod
    def ready(conn: Connection) -> bool:
        """Whether a reader may ask the index: the table of today's columns and its triggers
        are there (so it holds every exchange) and this SQLite can read it."""
        schema = TextIndex._schema(conn)
        return (
            schema.keys() >= {TABLE, *TRIGGERS}
            and _current(schema[TABLE])
            and TextIndex._usable(conn, table=True) is True
        )

    @staticmethod
    def keep_at_open(engine: Engine, writing_engine: Engine) -> None:
        """What a store's open does: look (a read: the common case ends there), and mend
        under the write lock if need be (``writing_engine`` begins IMMEDIATE)."""
        with engine.connect() as conn, conn.begin():
            if not TextIndex.keep(conn, mend=False):
                return
        try:
            with writing_engine.connect() as conn, conn.begin():
                TextIndex.keep(conn)
        except DBAPIError as e:
            # A store this process may not write, or one another process is mending (a
            # rebuild holds the lock about a minute per million exchanges): it opens all
            # the same, and readers scan while the index is not whole.
            log.warning(
                "ssetape: could not mend the store's text index (%s): --grep reads every "
                "exchange until it is",
                _why(e),
            )

    @staticmethod
    def keep(conn: Connection, *, mend: bool = True) -> bool:
        """At open: whether the text index needs mending, and with ``mend`` (in a
        transaction that holds the write lock, so that two processes opening the store at
        once mend it once) mend it:

        - its triggers dropped where this SQLite cannot run them (every insert would fail);
        - put back, and the index rebuilt, where it can again;
        - made, where the store was made by a SQLite that could not (migration 0012 made
          nothing) and this one can;
        - made anew, where it indexes other columns than today's (migration 0015 could not
          drop the old table) and this SQLite can.
        """
        schema = TextIndex._schema(conn)
        names = set(schema)
        usable = TextIndex._usable(conn, table=TABLE in names)
        if usable is None:
            return False  # an error that says nothing of the library: leave it be
        present = names & set(TRIGGERS)
        if TABLE not in names or (usable and not _current(schema[TABLE])):
            if not usable:
                return False
            if mend:
                log.warning("ssetape: building the store's text index (--grep)")
                TextIndex.drop(conn)
                TextIndex.create(conn)
            return True
        if not usable:
            if not present:
                return False  # dropped already
            if mend:
                for name in TRIGGERS:
                    conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {name}")
                log.warning(
                    "ssetape: this SQLite (%s) cannot keep the store's text index: "
                    "dropped its triggers, --grep reads every exchange",
                    sqlite3.sqlite_version,
                )
            return True
        if present == set(TRIGGERS):
            return False
        if mend:
            log.warning("ssetape: rebuilding the store's text index (--grep)")
            TextIndex._triggers(conn)
            conn.exec_driver_sql(f"INSERT INTO {TABLE}({TABLE}) VALUES ('rebuild')")
        return True

    @staticmethod
    def _schema(conn: Connection) -> dict[str, str | None]:
        """The table and the triggers the store has, each with the SQL that made it."""
        wanted = (TABLE, *TRIGGERS)
        marks = ", ".join("?" * len(wanted))
        found = conn.exec_driver_sql(
            f"SELECT name, sql FROM sqlite_master WHERE name IN ({marks})", wanted
        )
        return {row[0]: row[1] for row in found}

    @staticmethod
    def _usable(conn: Connection, *, table: bool) -> bool | None:
        """Whether this SQLite can read the store's table (``table``), or make one like it
        (a temporary one, which writes nothing to the store); None on any other error."""
        probe = (
            f"SELECT rowid FROM {TABLE} WHERE rowid = 0"
            if table
            else "CREATE VIRTUAL TABLE temp.ssetape_probe USING fts5(a, tokenize='trigram')"
        )
        try:
            with conn.begin_nested():
                conn.exec_driver_sql(probe)
                if not table:
                    conn.exec_driver_sql("DROP TABLE temp.ssetape_probe")
        except DBAPIError as e:
            return False if any(m in _why(e) for m in _UNABLE) else None
        return True

    @staticmethod
    def _triggers(conn: Connection) -> None:
        for name, body in TRIGGERS.items():
            conn.exec_driver_sql(f"CREATE TRIGGER IF NOT EXISTS {name} {body}")
