"""The web viewer's server time on a big store: the list, a filtered list, a long exchange.

    python -m bench.bench_web [--exchanges 1000000] [--events 100000] [--db URL] [--rounds 7]

The store is written straight (bulk inserts, no proxy): ``--exchanges`` completed chat
streams, one a second, of a few models, APIs, hosts and outcomes, then one stream of
``--events`` events (10 ms apart, chat chunks with text). ``--db``: a PostgreSQL URL instead
of a temporary SQLite file (its tables must be empty: use a schema of its own, e.g.
``?options=-csearch_path%3Dbench``). Each page is asked of the viewer's app in process
(Starlette's TestClient: no socket, no browser), ``--rounds`` times after one warm-up; the
median is printed, in milliseconds of server time (rendering included, transfer not).
"""

from __future__ import annotations

import argparse
import datetime as dt
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import orjson
from sqlalchemy import Connection, Table
from starlette.testclient import TestClient

from bench.tapes import HOST, PATH, chat_body
from ssetape.storage.models import Event, Exchange
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from ssetape.web.app import create_app

MODELS = ("gpt-4o-mini", "gpt-4o", "claude-sonnet-4", "gemini-2.5-flash")
APIS = ("chat_completions", "chat_completions", "messages", "gemini")
HOSTS = (HOST, HOST, "api.anthropic.test", "gemini.example.test")
OUTCOMES = ("completed",) * 18 + ("error", "refused")
BATCH = 20_000


def _columns(conn: Connection, table: Table, names: list[str]) -> tuple[str, list[Any]]:
    """An INSERT in the driver's own parameter style, and each column's bind processor: rows
    go in as plain tuples, as fast as the driver takes them."""
    dialect = conn.dialect
    style = "?" if dialect.paramstyle == "qmark" else "%s"
    sql = (
        f"INSERT INTO {table.name} ({', '.join(names)}) VALUES ({', '.join([style] * len(names))})"
    )
    return sql, [table.c[n].type.bind_processor(dialect) for n in names]


def _rows(n: int, start: dt.datetime, procs: list[Any]) -> Iterator[tuple[Any, ...]]:
    headers = [["content-type", "application/json"]]
    resp = [["content-type", "text/event-stream"]]
    for i in range(n):
        k = i % 4
        text = f"Answer {i}: the tape turns and the stream goes on."
        row = (
            secrets.token_hex(16), start + dt.timedelta(seconds=i), "POST", "https", HOSTS[k],
            443, PATH, "", "HTTP/1.1", headers, chat_body(f"q {i}", stream=True),
            f"{i:064x}", 200, "OK", resp, True, "completed", 1000 + i % 500,
            900_000 + i % 50_000, 40, APIS[k], MODELS[k], OUTCOMES[i // 4 % len(OUTCOMES)],
            12, 40, 52, 200_000 + i % 70_000, text,
        )  # fmt: skip
        yield tuple(p(v) if p else v for p, v in zip(procs, row, strict=True))


_EXCHANGE_COLS = [
    "uid", "started_at", "method", "scheme", "host", "port", "path", "query", "http_version",
    "request_headers", "request_body", "fingerprint", "status", "reason", "response_headers",
    "is_stream", "state", "ttfb_us", "duration_us", "event_count", "api", "model", "outcome",
    "input_tokens", "output_tokens", "total_tokens", "ttft_us", "output_text",
]  # fmt: skip


def build(db: str, exchanges: int, events: int) -> int:
    """Writes the store; returns the id of the long stream."""
    exchanges_t = cast(Table, Exchange.__table__)
    events_t = cast(Table, Event.__table__)
    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    with Store.open(db) as store, store.engine.begin() as conn:
        sql, procs = _columns(conn, exchanges_t, _EXCHANGE_COLS)
        rows = _rows(exchanges, start, procs)
        while batch := [r for _, r in zip(range(BATCH), rows, strict=False)]:
            conn.exec_driver_sql(sql, batch)  # type: ignore[arg-type]
        # The long stream is the newest exchange: the first row of the list.
        procs_one = [exchanges_t.c[n].type.bind_processor(conn.dialect) for n in _EXCHANGE_COLS]
        [long_row] = _rows(1, start + dt.timedelta(seconds=exchanges + 60), procs_one)
        values = dict(zip(_EXCHANGE_COLS, long_row, strict=True))
        values.update(
            uid=secrets.token_hex(16), event_count=events, duration_us=events * 10_000,
            ttft_us=20_000, model="gpt-long", output_text="w" * events,
        )  # fmt: skip
        sql_one, _ = _columns(conn, exchanges_t, list(values))
        conn.exec_driver_sql(sql_one, tuple(values.values()))
        xid = int(conn.exec_driver_sql(f"SELECT max(id) FROM {exchanges_t.name}").scalar_one())
        ev_sql, _ = _columns(conn, events_t, ["exchange_id", "seq", "offset_us", "data", "raw"])
        chunk = {"id": "c", "object": "chat.completion.chunk", "model": "gpt-long"}
        batch = []
        for i in range(events):
            delta = {"content": "w"} if 0 < i < events - 1 else {"role": "assistant"}
            obj = {**chunk, "choices": [{"index": 0, "delta": delta}]}
            data = orjson.dumps(obj).decode() if i < events - 1 else "[DONE]"
            batch.append((xid, i, 5_000 + i * 10_000, data, f"data: {data}\n\n".encode()))
            if len(batch) == BATCH:
                conn.exec_driver_sql(ev_sql, batch)  # type: ignore[arg-type]
                batch = []
        if batch:
            conn.exec_driver_sql(ev_sql, batch)  # type: ignore[arg-type]
    with Store.open(db) as store, store.engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            # What autovacuum does soon after a bulk write: without statistics the planner
            # reads a stream's every remaining event for each page of it (a bitmap scan, a sort).
            conn.exec_driver_sql(f"ANALYZE {exchanges_t.name}")
            conn.exec_driver_sql(f"ANALYZE {events_t.name}")
    return xid


def timed(client: TestClient, url: str, rounds: int) -> tuple[float, int]:
    """(median milliseconds, bytes) of GET ``url``, after one warm-up."""
    r = client.get(url)
    assert r.status_code == 200, (url, r.status_code, r.text[:300])
    took = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        r = client.get(url)
        took.append((time.perf_counter() - t0) * 1000)
    return statistics.median(took), len(r.content)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--exchanges", type=int, default=1_000_000)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--db", help="a PostgreSQL URL (default: a temporary SQLite file)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ssetape-bench-web-") as tmp:
        db = args.db or str(Path(tmp) / "web.db")
        t0 = time.perf_counter()
        xid = build(db, args.exchanges, args.events)
        print(f"store: {args.exchanges:,} exchanges + 1 of {args.events:,} events, "
              f"written in {time.perf_counter() - t0:.1f} s")  # fmt: skip
        store = Store.open(db)
        try:
            client = TestClient(create_app(Queries(store)))
            queries = Queries(store)
            middle = queries.exchanges(limit=1)[0].id - args.exchanges // 2
            pages = [
                ("/ (first page)", "/"),
                ("/ a page deep in the list", f"/?before={middle}"),
                ("/ filtered: model + outcome", "/?model=claude-sonnet-4&outcome=refused"),
                ("/ filtered: api + host", "/?api=messages&host=api.anthropic.test"),
                (f"/exchanges/{xid} ({args.events:,} events)", f"/exchanges/{xid}"),
                (f"/exchanges/{xid}/timeline", f"/exchanges/{xid}/timeline"),
                (f"/exchanges/{xid}/timeline?zoom=16", f"/exchanges/{xid}/timeline?zoom=16"),
                ("/ text search ?q= (full scan)", "/?q=no-such-text"),
                ("/ a model one exchange has (walks the index)", "/?model=gpt-long"),
            ]
            for name, url in pages:
                ms, size = timed(client, url, args.rounds)
                print(f"{name:48} {ms:8.1f} ms  {size / 1024:8.1f} KiB")
        finally:
            store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
