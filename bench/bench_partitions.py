"""PostgreSQL day partitions: the in-place migration's downtime, and the prune of a whole day.

    python -m bench.bench_partitions --db postgresql+psycopg://postgres@127.0.0.1:5432/test
                                     [--events 10000000] [--per-exchange 100]

In a database of its own (``ssetape_bench_partitions``, made afresh on the server of ``--db``):

1. **Migration.** A store at revision 0007 (events not partitioned) gets ``--events`` events
   of ``--events / --per-exchange`` exchanges, by COPY; then ``Store.open`` migrates it to
   0008 in place. Its wall time is the downtime: recorders wait for the lock it holds
   (``LOCK TABLE events``) from its start to its commit. Every row is counted after.
2. **Prune of a day.** In a store made afresh at 0008, a day 40 days back gets ``--events``
   events of its own (its exchanges started that day, the events in that day's partition);
   ``Pruner.prune(now - 30d)`` then takes them. Reported: the whole prune, and the prune's
   own line for the day's partition: its DROP (the lock writers wait for) apart from the
   check and the count before it (a read).
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import time
from typing import Any

import psycopg
from alembic import command
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from ssetape.storage import partitions
from ssetape.storage.prune import Pruner
from ssetape.storage.store import Store, alembic_config

BENCH_DB = "ssetape_bench_partitions"
RAW = (
    b'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"delta":{"content":"w"}}]}\n\n'
)


def fresh_db(base: str) -> str:
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)"))
        conn.execute(text(f"CREATE DATABASE {BENCH_DB}"))
    admin.dispose()
    return make_url(base).set(database=BENCH_DB).render_as_string(hide_password=False)


def load(url: str, events: int, per: int, started: dt.datetime, day: dt.date | None) -> None:
    """``events`` events of ``events // per`` finished exchanges begun at ``started``, by
    COPY; ``day``: the events' partition day (None: the column does not exist yet)."""
    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn) as conn:
        first = conn.execute("SELECT coalesce(max(id), 0) + 1 FROM exchanges").fetchone()
        assert first is not None
        ids = range(first[0], first[0] + events // per)
        cols = ("id, uid, started_at, method, scheme, host, port, path, query, http_version, "
                "request_headers, fingerprint, is_stream, state, event_count")  # fmt: skip
        with conn.cursor().copy(f"COPY exchanges ({cols}) FROM STDIN") as copy:
            for xid in ids:
                copy.write_row((xid, f"{xid:032x}", started, "POST", "https", "api.openai.com",
                                443, "/v1/chat/completions", "", "HTTP/1.1", "[]", "f" * 64,
                                True, "completed", per))  # fmt: skip
        extra = ", day" if day is not None else ""
        sql = f"COPY events (exchange_id, seq, offset_us, data, raw{extra}) FROM STDIN"
        sql += " (FORMAT BINARY)"
        types = ["bigint", "integer", "bigint", "text", "bytea"] + (["date"] if day else [])
        with conn.cursor().copy(sql) as copy:
            copy.set_types(types)
            data = RAW[6:-2].decode()
            for xid in ids:
                for seq in range(per):
                    row: tuple[Any, ...] = (xid, seq, seq * 20_000, data, RAW)
                    copy.write_row(row + ((day,) if day is not None else ()))
    # As a store settles: autovacuum has been by (an old day's partition is not being
    # vacuumed when it is dropped, and its visibility map lets a count read the index).
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE)")


def count(url: str, sql: str) -> int:
    engine = create_engine(url)
    with engine.connect() as conn:
        n = int(conn.execute(text(sql)).scalar_one())
    engine.dispose()
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--db", required=True, help="a PostgreSQL URL (its server is used)")
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--per-exchange", type=int, default=100)
    ap.add_argument("--only", choices=["migration", "prune"], help="one of the two steps")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    now = dt.datetime.now(dt.UTC)
    if args.only != "prune":
        migration(args)
    if args.only != "migration":
        prune(args, now)


def migration(args: argparse.Namespace) -> None:
    url = fresh_db(args.db)
    now = dt.datetime.now(dt.UTC)

    engine = create_engine(url)
    cfg = alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0007")
    engine.dispose()
    t0 = time.perf_counter()
    load(url, args.events, args.per_exchange, now - dt.timedelta(hours=1), None)
    print(f"loaded {args.events:,} events at 0007 in {time.perf_counter() - t0:.1f} s")
    t0 = time.perf_counter()
    Store.open(url).close()
    took = time.perf_counter() - t0
    held = count(url, f"SELECT count(*) FROM {partitions.LEGACY}")
    print(
        f"| migration 0008 in place | {args.events:,} events | {took:.2f} s | "
        f"{held:,} events kept in {partitions.LEGACY} |"
    )


def prune(args: argparse.Namespace, now: dt.datetime) -> None:
    # A store partitioned from its start (in the migrated one, every past day is legacy's).
    url = fresh_db(args.db)
    old = now - dt.timedelta(days=40)
    store = Store.open(url)
    with store.engine.begin() as conn:
        partitions.make(conn, old.date())
    t0 = time.perf_counter()
    load(url, args.events, args.per_exchange, old, old.date())
    print(f"loaded {args.events:,} events into {old.date()} in {time.perf_counter() - t0:.1f} s")
    said: list[str] = []  # the prune's own line per partition: its DROP and its count

    class Said(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            said.append(record.getMessage())

    logging.getLogger("ssetape.storage").addHandler(Said(logging.INFO))
    logging.getLogger("ssetape.storage").setLevel(logging.INFO)
    t0 = time.perf_counter()
    report = Pruner(store).prune(now - dt.timedelta(days=30))
    took = time.perf_counter() - t0
    store.close()
    for line in said:
        print(f"| prune of a day, the partition | {line} |")
    print(
        f"| prune of a day, all of it (and {report.exchanges:,} exchange rows) | "
        f"{report.events:,} events | {took:.2f} s | {report.line()} |"
    )


if __name__ == "__main__":
    main()
