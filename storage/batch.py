"""One transaction of the writer: the queued ops it groups and the SQL that applies them.

The writer (ssetape.storage.writer) owns the queue, the thread, retries and counters; a
Batch only turns a list of ops into as few statements as possible and runs them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any, cast

from sqlalchemy import Connection, Engine, Table, bindparam, func, insert, select, update
from sqlalchemy.dialects import postgresql

from ssetape.storage.models import Base, Event, Exchange, no_nul

EXCHANGES = cast(Table, Exchange.__table__)
EVENTS = cast(Table, Event.__table__)
# The new exchanges of a batch in one statement (SQLAlchemy's "insertmanyvalues"): each id
# comes back with its uid, in whatever order.
_INSERT_EXCHANGES = insert(EXCHANGES).returning(EXCHANGES.c.uid, EXCHANGES.c.id)
# Built once: SQLAlchemy caches a statement's compiled form, but a statement built per call
# (``update().where(id == 7).values({...})``) first walks its literal values for a cache key,
# which cost more than SQLite's work for the row. Bound values come at execution, and the
# updates of one batch with the same columns go in one executemany.
_FIND = select(EXCHANGES.c.uid, EXCHANGES.c.id).where(
    EXCHANGES.c.uid.in_(bindparam("uids_", expanding=True))
)
_UPDATE = update(EXCHANGES).where(EXCHANGES.c.id == bindparam("xid_"))
_ADD, _RECOUNT = "n_", "recount"  # with the events added, or recounted from the rows
_UPDATES = {
    "": _UPDATE,
    _ADD: _UPDATE.values(event_count=EXCHANGES.c.event_count + bindparam(_ADD)),
    _RECOUNT: _UPDATE.values(
        event_count=select(func.count())
        .where(EVENTS.c.exchange_id == bindparam("xid_"))
        .scalar_subquery()
    ),
}
_COLUMNS = frozenset(EXCHANGES.c.keys()) - {"id", "uid", "event_count"}

# Operation kinds; an op is (kind, uid, payload). Plain tuples: the recording process queues
# one per exchange and batch from the proxy, beside its parsing, so they must be cheap.
BEGIN, UPDATE, EVENTS_OP, CHUNKS_OP, FINISH, FLUSH, STOP = range(7)
Op = tuple[int, str, Any]
ROWS = frozenset((EVENTS_OP, CHUNKS_OP))
# Table and row layout per row kind: rows are plain tuples in this column order (the
# exchange's id goes in front when it is known).
TABLES = {
    EVENTS_OP: ("events", ("seq", "offset_us", "event", "data", "sse_id", "raw")),
    CHUNKS_OP: ("chunks", ("seq", "offset_us", "data")),
}

# An event row as written: a WebSocket message's two more columns (records.MessageRow) follow
# the event's; an HTTP stream's rows get NULL there (``_event_rows``).
WRITTEN = {
    EVENTS_OP: (*TABLES[EVENTS_OP][1], "direction", "opcode"),
    CHUNKS_OP: TABLES[CHUNKS_OP][1],
}


def fields(payload: dict[str, Any]) -> dict[str, Any]:
    unknown = set(payload) - _COLUMNS
    if unknown:  # names only: values may be traffic contents
        raise ValueError(f"unknown or read-only Exchange field(s): {', '.join(sorted(unknown))}")
    return payload


def _ignore(_: Any) -> None:
    pass


def _clean_event(row: tuple[Any, ...]) -> tuple[Any, ...]:
    # Event rows skip SQLAlchemy's types (see BatchSql), so the models' NUL rule is applied
    # here; exchange fields go through the column types and get it there.
    seq, offset, event, data, sse_id, raw, *message = row
    return (seq, offset, no_nul(event), no_nul(data), no_nul(sse_id), raw, *message)


def _event_rows(xid: int, rows: list[tuple[Any, ...]], is_sqlite: bool) -> list[tuple[Any, ...]]:
    """One exchange's event rows in the table's column order. An HTTP stream's rows
    (``records.EventRow``) have no direction nor opcode: NULL; a WebSocket session's
    (``records.MessageRow``) have both. One exchange's rows are all of one kind."""
    if rows and len(rows[0]) == len(WRITTEN[EVENTS_OP]):
        return (
            [(xid, *_clean_event(r)) for r in rows] if not is_sqlite else [(xid, *r) for r in rows]
        )
    if is_sqlite:
        return [(xid, *r, None, None) for r in rows]
    return [(xid, *_clean_event(r), None, None) for r in rows]


class BatchSql:
    """The raw statements a Batch runs, built once per writer for its database."""

    def __init__(self, engine: Engine, *, is_sqlite: bool) -> None:
        self.is_sqlite = is_sqlite
        mark = "?" if engine.dialect.paramstyle == "qmark" else "%s"
        # Events and chunks skip SQLAlchemy's per-row parameter processing (most
        # of the time at 100k rows/s): DBAPI executemany of tuples, same
        # transaction. Their columns need no type conversion.
        self.insert = {
            kind: f"INSERT INTO {table} (exchange_id, {', '.join(keys)}) "
            f"VALUES ({', '.join([mark] * (len(keys) + 1))})"
            for kind, (table, _) in TABLES.items()
            for keys in [WRITTEN[kind]]
        }
        # A batch repeated after a commit of unknown outcome skips the rows that made it. On
        # PostgreSQL the events' key holds the day they were written (their partition), so a
        # repeat after midnight would not conflict: there, rows are skipped by (exchange_id,
        # seq) themselves; the statement takes each row's two followed by them again.
        self.careful = {kind: f"{sql} ON CONFLICT DO NOTHING" for kind, sql in self.insert.items()}
        if not is_sqlite:
            table, keys = TABLES[EVENTS_OP][0], WRITTEN[EVENTS_OP]
            self.careful[EVENTS_OP] = (
                f"INSERT INTO {table} (exchange_id, {', '.join(keys)}) "
                f"SELECT {', '.join([mark] * (len(keys) + 1))} WHERE NOT EXISTS "
                f"(SELECT 1 FROM {table} WHERE exchange_id = {mark} AND seq = {mark})"
            )
        self.count = f"UPDATE exchanges SET event_count = event_count + {mark} WHERE id = {mark}"


class Batch:
    """Groups ``ops`` by exchange; ``apply`` commits them and fills in the results.

    ``known`` maps uids to exchange ids the writer already has; it is only read.
    """

    def __init__(self, ops: list[Op], known: dict[str, int]) -> None:
        self.known = known
        self.begins: dict[str, dict[str, Any]] = {}
        self.updates: dict[str, dict[str, Any]] = {}
        self.row_ops: dict[tuple[int, str], list[tuple[Any, ...]]] = {}  # rows by (kind, uid)
        self.finished: list[str] = []
        self.exchange_ops = 0
        for kind, uid, payload in ops:
            if kind in ROWS:  # the hot loop: one dict lookup and a C-level extend
                bucket = self.row_ops.get((kind, uid))
                if bucket is None:
                    self.row_ops[kind, uid] = bucket = []
                bucket += payload
                continue
            self.exchange_ops += 1
            if kind == BEGIN and uid not in known and uid not in self.begins:
                self.begins[uid] = dict(fields(payload))
            else:  # update, finish, or a repeated begin (an update too)
                target = (
                    self.begins[uid] if uid in self.begins else self.updates.setdefault(uid, {})
                )
                target.update(fields(payload))
                if kind == FINISH:
                    self.finished.append(uid)
        # Results of apply():
        self.ids: dict[str, int] = {}  # newly learnt uid -> id
        self.dropped: list[Op] = []  # row ops whose exchange does not exist
        self.rows: dict[int, list[tuple[Any, ...]]] = {kind: [] for kind in TABLES}
        self.new = 0  # exchange rows inserted

    def apply(
        self,
        engine: Engine,
        sql: BatchSql,
        *,
        careful: bool = False,
        guard: Callable[[], AbstractContextManager[Callable[[Any], None]]] | None = None,
        then: Callable[[Connection, Batch], None] | None = None,
    ) -> None:
        """One transaction: one INSERT per new exchange, one executemany (PostgreSQL:
        COPY) per row kind, and one UPDATE per touched exchange (merged fields plus
        the event_count increment).

        ``careful`` makes it safe to repeat after a commit whose outcome was
        unknown (connection lost during COMMIT): duplicate rows are skipped and
        event_count is recounted instead of incremented. ``guard`` times the whole
        transaction, commit included, and is told its DBAPI connection (the writer's
        deadline watchdog). ``then`` runs last in the same transaction (the run row's counts).
        """
        known, ids, updates = self.known, self.ids, self.updates
        counts = {uid: len(rs) for (kind, uid), rs in self.row_ops.items() if kind == EVENTS_OP}
        timed = guard() if guard is not None else nullcontext(_ignore)
        with timed as attach, engine.begin() as conn:
            attach(conn.connection.driver_connection)
            # Exchanges without a known id: begun before a retry whose outcome
            # was unknown, finished already (late ops), or by an earlier writer.
            missing = (
                set(self.begins) | {uid for _, uid in self.row_ops} | set(updates)
            ) - known.keys()
            if missing:
                ids.update({u: i for u, i in conn.execute(_FIND, {"uids_": list(missing)})})
            # Runs of new exchanges with the same columns, in the order they began (so are
            # their ids): one statement each.
            inserts: list[tuple[list[str], list[dict[str, Any]]]] = []
            for uid, values in self.begins.items():
                if uid in ids:
                    updates.setdefault(uid, {}).update(values)
                    continue
                values = {**values, "uid": uid, "event_count": counts.pop(uid, 0)}
                columns = sorted(values)
                if inserts and inserts[-1][0] == columns:
                    inserts[-1][1].append(values)
                else:
                    inserts.append((columns, [values]))
            for _, rows in inserts:
                for uid, xid in conn.execute(_INSERT_EXCHANGES, rows):
                    ids[uid] = xid
                    self.new += 1
            for (kind, uid), payload in self.row_ops.items():
                xid = known.get(uid) or ids.get(uid)
                if xid is None:
                    self.dropped.append((kind, uid, payload))
                    counts.pop(uid, None)
                elif kind == EVENTS_OP:
                    self.rows[kind] += _event_rows(xid, payload, sql.is_sqlite)
                else:
                    self.rows[kind] += [(xid, *r) for r in payload]
            if careful:  # event_count is recounted from the rows: they go first
                self._insert(conn, sql, careful)
            increments: list[tuple[int, int]] = []  # (events added, exchange id)
            # Per statement (_UPDATES) and set of columns: the parameters of each exchange.
            grouped: dict[tuple[str, tuple[str, ...]], list[dict[str, Any]]] = {}
            for uid in updates.keys() | counts.keys():
                xid = known.get(uid) or ids.get(uid)
                if xid is None:
                    continue  # its begin never made it: nothing to update
                values = updates.get(uid, {})
                added = counts.get(uid, 0)
                if careful:
                    how, params = _RECOUNT, {**values, "xid_": xid}
                elif added:
                    if not values:  # the common case: all of them in one executemany
                        increments.append((added, xid))
                        continue
                    how, params = _ADD, {**values, "xid_": xid, _ADD: added}
                elif values:
                    how, params = "", {**values, "xid_": xid}
                else:
                    continue
                grouped.setdefault((how, tuple(sorted(values))), []).append(params)
            for (how, _), params_list in grouped.items():
                conn.execute(_UPDATES[how], params_list)
            if increments:
                conn.exec_driver_sql(sql.count, increments)
            if not careful:
                # After the exchanges' updates: a writer's row locks are taken in one
                # order, its exchanges' first.
                self._insert(conn, sql, careful)
            if then is not None:
                then(conn, self)

    def _insert(self, conn: Connection, sql: BatchSql, careful: bool) -> None:
        for kind, kind_rows in self.rows.items():
            if kind_rows:  # one executemany (or COPY) per batch, not per exchange
                _insert_rows(conn, sql, kind, kind_rows, careful)


def _insert_rows(
    conn: Connection, sql: BatchSql, kind: int, rows: list[tuple[Any, ...]], careful: bool
) -> None:
    if careful:
        if kind == EVENTS_OP and not sql.is_sqlite:
            rows = [(*r, r[0], r[1]) for r in rows]
        conn.exec_driver_sql(sql.careful[kind], rows)
        return
    if sql.is_sqlite:
        conn.exec_driver_sql(sql.insert[kind], rows)
        return
    # PostgreSQL: COPY is about twice as fast as executemany.
    table, keys = TABLES[kind][0], WRITTEN[kind]
    raw: Any = conn.connection.driver_connection
    with (
        raw.cursor() as cur,
        cur.copy(
            f"COPY {table} (exchange_id, {', '.join(keys)}) FROM STDIN (FORMAT BINARY)"
        ) as copy,
    ):
        # Binary rows: the server parses no text (bytea as hex, numbers as digits). Two
        # recorders into one PostgreSQL stored ~10 % more events/s, with less of the
        # server's CPU (python -m bench.bench_ingest).
        copy.set_types(copy_types(kind))
        for row in rows:
            copy.write_row(row)


@functools.cache
def copy_types(kind: int) -> list[str]:
    """The PostgreSQL types of a COPY's columns, as the models declare them."""
    table, keys = TABLES[kind][0], WRITTEN[kind]
    columns = Base.metadata.tables[table].c
    pg = postgresql.dialect()  # type: ignore[no-untyped-call]
    return [columns[k].type.compile(dialect=pg).lower()
            for k in ("exchange_id", *keys)]  # fmt: skip
