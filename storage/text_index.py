"""SQLite's index of `--grep`: an FTS5 trigram table over exchanges' output text and path.

PostgreSQL indexes `--grep` with ``pg_trgm`` (migration 0011). SQLite's ``LIKE '%word%'``
can use no B-tree index, so a word no exchange holds read every exchange (1.8 s a million).
FTS5's trigram tokenizer (SQLite 3.34+) indexes every three characters of both columns and
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
triggers with the old table: it must call :meth:`TextIndex.create` after.
"""

from __future__ import annotations

import logging
import sqlite3

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

__all__ = ["TextIndex"]

log = logging.getLogger("ssetape.storage")

TABLE = "exchanges_text"
_COLUMNS = "output_text, path"
_NEW = f"INSERT INTO {TABLE}(rowid, {_COLUMNS}) VALUES (new.id, new.output_text, new.path)"
_OLD = (
    f"INSERT INTO {TABLE}({TABLE}, rowid, {_COLUMNS}) "
    "VALUES ('delete', old.id, old.output_text, old.path)"
)
TRIGGERS = {
    f"{TABLE}_ai": f"AFTER INSERT ON exchanges BEGIN {_NEW}; END",
    f"{TABLE}_ad": f"AFTER DELETE ON exchanges BEGIN {_OLD}; END",
    # Only when either column is written: the recorder updates an exchange's other columns
    # many times, its text once, at the end.
    f"{TABLE}_au": f"AFTER UPDATE OF {_COLUMNS} ON exchanges BEGIN {_OLD}; {_NEW}; END",
}


class TextIndex:
    """Making, checking and mending a SQLite store's text index (see the module's text)."""

    @staticmethod
    def create(conn: Connection) -> bool:
        """Make the table and its triggers and index what the store holds; False (and one
        warning) when this SQLite cannot."""
        try:
            with conn.begin_nested():
                conn.exec_driver_sql(
                    f"CREATE VIRTUAL TABLE IF NOT EXISTS {TABLE} USING fts5({_COLUMNS}, "
                    "content='exchanges', content_rowid='id', tokenize='trigram', detail=none)"
                )
        except DBAPIError as e:
            log.warning(
                "ssetape: SQLite %s has no FTS5 trigram tokenizer (%s): --grep reads every "
                "exchange",
                sqlite3.sqlite_version,
                str(e.orig).splitlines()[0] if e.orig is not None else e,
            )
            return False
        TextIndex._triggers(conn)
        # A minute or so for a million exchanges with long texts (BENCHMARKS.md).
        conn.exec_driver_sql(f"INSERT INTO {TABLE}({TABLE}) VALUES ('rebuild')")
        return True

    @staticmethod
    def keep(conn: Connection, *, mend: bool = True) -> bool:
        """At open: whether the text index needs mending: its triggers dropped where this
        SQLite cannot run them, or put back (and the index rebuilt) where it can again.
        With ``mend``, mend it too: in a transaction that holds the write lock, so that two
        processes opening the store at once mend it once."""
        wanted = (TABLE, *TRIGGERS)
        marks = ", ".join("?" * len(wanted))
        found = conn.exec_driver_sql(
            f"SELECT name FROM sqlite_master WHERE name IN ({marks})", wanted
        )
        names = {row[0] for row in found}
        if TABLE not in names:
            return False  # made without it (see create), or before migration 0012
        try:
            with conn.begin_nested():
                conn.exec_driver_sql(f"SELECT rowid FROM {TABLE} WHERE rowid = 0").all()
        except DBAPIError as e:
            if not names & set(TRIGGERS):
                return False  # dropped already
            if mend:
                for name in TRIGGERS:
                    conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {name}")
                log.warning(
                    "ssetape: this SQLite (%s) cannot keep the store's text index (%s): "
                    "dropped its triggers, --grep reads every exchange",
                    sqlite3.sqlite_version,
                    str(e.orig).splitlines()[0] if e.orig is not None else e,
                )
            return True
        if names >= set(TRIGGERS):
            return False
        if mend:
            log.warning("ssetape: rebuilding the store's text index (--grep)")
            TextIndex._triggers(conn)
            conn.exec_driver_sql(f"INSERT INTO {TABLE}({TABLE}) VALUES ('rebuild')")
        return True

    @staticmethod
    def _triggers(conn: Connection) -> None:
        for name, body in TRIGGERS.items():
            conn.exec_driver_sql(f"CREATE TRIGGER IF NOT EXISTS {name} {body}")
