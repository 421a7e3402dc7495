"""Write throughput of ssetape's storage Writer, driven the way the recorder drives it.

20 concurrent streamed exchanges, 100,000 events in total (~200-byte raw
each), fed round-robin from one thread (the proxy's event loop) with one
add_events call per event, as chunks arrive. A round runs from the first
begin() until flush() confirms every row is committed; each backend runs
--rounds rounds on a fresh database and the table shows the median and best.
"caller" is what each Writer call costs the event loop.

A reference row inserts the same rows with plain sqlite3 executemany (same
schema and pragmas, no ssetape): the ceiling of the SQLite engine on this box.

    python bench/bench_store.py
    SSETAPE_TEST_PG_URL=postgresql+psycopg://postgres@127.0.0.1:5432/test \\
        python bench/bench_store.py        # adds PostgreSQL (throwaway schema)

Goal: >= 100k events/s on SQLite.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import secrets
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import orjson
from sqlalchemy import create_engine, func, select, text
from sqlalchemy.engine import make_url

from ssetape.records import EventRow
from ssetape.storage.models import Event, Exchange
from ssetape.storage.store import Store
from ssetape.storage.writer import Writer


@contextmanager
def sqlite_target() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="ssetape-bench-") as d:
        yield str(Path(d) / "bench.db")


@contextmanager
def pg_target(base: str) -> Iterator[str]:
    schema = f"ssetape_bench_{secrets.token_hex(4)}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'CREATE SCHEMA "{schema}"'))
    try:
        url = make_url(base).update_query_dict({"options": f"-csearch_path={schema}"})
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.connect() as c:
            c.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


def make_event(seq: int) -> EventRow:
    chunk = {
        "id": "chatcmpl-bench0123456789abcdef",
        "created": 1735689600,
        "object": "chat.completion.chunk",
        "choices": [
            {
                "index": 0,
                "delta": {"content": f"token {seq:06d} of the benchmark stream "},
                "finish_reason": None,
            }
        ],
    }
    data = orjson.dumps(chunk).decode()
    raw = f"data: {data}\n\n".encode()
    return (seq, seq * 1000, "message", data, None, raw)


def begin_fields() -> dict[str, object]:
    return {
        "started_at": dt.datetime.now(dt.UTC),
        "method": "POST",
        "scheme": "https",
        "host": "api.example.com",
        "port": 443,
        "path": "/v1/chat/completions",
        "query": "",
        "http_version": "HTTP/1.1",
        "request_headers": [["content-type", "application/json"]],
        "request_body": b'{"model":"m","stream":true}',
        "fingerprint": "0" * 64,
        "is_stream": True,
    }


def writer_round(target: str, exchanges: int, rows: list[list[EventRow]]) -> tuple[float, float]:
    """One round through Writer; returns (seconds until committed, caller µs per call)."""
    store = Store.open(target)
    writer = Writer(store)
    writer.start()
    uids = [secrets.token_hex(16) for _ in range(exchanges)]
    t0 = time.perf_counter()
    for uid in uids:
        writer.begin(uid, **begin_fields())
        writer.update(uid, status=200, reason="OK", ttfb_us=1000)
    for seq_rows in rows:  # event n of every stream, then event n + 1, ...
        for uid in uids:
            writer.add_events(uid, seq_rows)
    for uid in uids:
        writer.finish(uid, state="completed", duration_us=len(rows) * 1000)
    caller = time.perf_counter() - t0  # the event loop's share: just the calls
    calls = exchanges * (len(rows) + 3)
    ok = writer.flush(timeout=120)
    elapsed = time.perf_counter() - t0
    stats = writer.stats
    writer.close()
    with store.Session() as s:
        stored = s.scalar(select(func.count()).select_from(Event))
        counted = s.scalar(select(func.sum(Exchange.event_count)))
    store.close()
    total = exchanges * len(rows)
    assert ok and stored == counted == total and stats.dropped_events == 0, (ok, stored, counted)
    return elapsed, caller / calls * 1e6


def raw_sqlite_round(target: str, exchanges: int, rows: list[list[EventRow]]) -> float:
    Store.open(target).close()  # same schema and file settings
    conn = sqlite3.connect(target, isolation_level=None)
    conn.execute("PRAGMA synchronous = NORMAL")
    for x in range(1, exchanges + 1):
        conn.execute(
            "INSERT INTO exchanges (id, uid, started_at, method, scheme, host, port, path, "
            "query, http_version, request_headers, fingerprint, is_stream, state) VALUES "
            "(?, ?, '2025-01-01', 'POST', 'https', 'h', 443, '/', '', '1.1', '[]', '0', 1, "
            "'recording')",
            (x, secrets.token_hex(16)),
        )
    flat = [(x, *r) for seq_rows in rows for r in seq_rows for x in range(1, exchanges + 1)]
    sql = (
        "INSERT INTO events (exchange_id, seq, offset_us, event, data, sse_id, raw) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)"
    )
    t0 = time.perf_counter()
    for i in range(0, len(flat), 10_000):
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(sql, flat[i : i + 10_000])
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - t0
    conn.close()
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--exchanges", type=int, default=20)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    per = args.events // args.exchanges
    total = per * args.exchanges
    rows = [[make_event(seq)] for seq in range(per)]  # pre-built: the parser is not measured
    raw_size = statistics.mean(len(r[0][5]) for r in rows)

    table: list[str] = []

    def report(name: str, times: list[float], caller: list[float] | None) -> None:
        med, best = statistics.median(times), min(times)
        cost = f"{statistics.median(caller):.1f} µs" if caller else "-"
        table.append(
            f"| {name} | {total:,} | {raw_size:.0f} B | {med:.2f} s | "
            f"{total / med:,.0f} | {total / best:,.0f} | {cost} |"
        )

    backends: list[tuple[str, Callable[[], AbstractContextManager[str]]]] = [
        ("SQLite", sqlite_target)
    ]
    pg = os.environ.get("SSETAPE_TEST_PG_URL")
    if pg:
        backends.append(("PostgreSQL", lambda: pg_target(pg)))
    for name, target in backends:
        results = []
        for _ in range(args.rounds):
            with target() as t:
                results.append(writer_round(t, args.exchanges, rows))
        report(f"{name} via Writer", [r[0] for r in results], [r[1] for r in results])
    raw_times = []
    for _ in range(args.rounds):
        with sqlite_target() as t:
            raw_times.append(raw_sqlite_round(t, args.exchanges, rows))
    report("SQLite engine alone (reference)", raw_times, None)

    print(f"{args.rounds} rounds each, {args.exchanges} exchanges, one event per call\n")
    print(
        "| backend | events | raw/event | median time | events/s (median) | "
        "events/s (best) | caller cost/call |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    print("\n".join(table))
    if not pg:
        print("\n(PostgreSQL skipped: set SSETAPE_TEST_PG_URL to include it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
