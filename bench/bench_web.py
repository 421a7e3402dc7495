"""The web viewer's server time on a big store: the list, a filtered list, a long exchange.

    python -m bench.bench_web [--exchanges 1000000] [--events 100000] [--db URL] [--rounds 7]

The store is written straight (bulk inserts, no proxy): ``--exchanges`` completed chat
streams, one a second, of a few models, APIs, hosts and outcomes, then one stream of
``--events`` events (10 ms apart, chat chunks with text). ``--db``: a PostgreSQL URL instead
of a temporary SQLite file (its tables must be empty: use a schema of its own, e.g.
``?options=-csearch_path%3Dbench``). Each page is asked of the viewer's app in process
(Starlette's TestClient: no socket, no browser), ``--rounds`` times after one warm-up; the
median is printed, in milliseconds of server time (rendering included, transfer not).

    python -m bench.bench_web --live-clients 400 [--body-mib 100] [--max-live N] [--exchanges 1000]

Live viewers instead: the store gets one more exchange, in flight, holding a ``--body-mib``
response body; `ssetape web` serves it (a process of its own, ``--max-live`` passed on when
given) to ``--live-clients`` clients of ``/live?after=0``, all connected at once, each
reading what it is sent (the list's feed from the start: every row, then the one in flight
followed, every second). While they are connected, the list page is timed (``--rounds``
times, median, over a socket); then the viewer's peak RSS (VmHWM), CPU seconds and how the
clients were answered are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import httpx
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


def add_big_body(db: str, mib: int, at: dt.datetime) -> int:
    """One more exchange, in flight (a live list follows it), whose response body is ``mib``
    MiB; its id."""
    exchanges_t = cast(Table, Exchange.__table__)
    with Store.open(db) as store, store.engine.begin() as conn:
        procs = [exchanges_t.c[n].type.bind_processor(conn.dialect) for n in _EXCHANGE_COLS]
        [row] = _rows(1, at, procs)
        values = dict(zip(_EXCHANGE_COLS, row, strict=True))
        values.update(uid=secrets.token_hex(16), state="recording", outcome=None, model="big-body")
        values["response_body"] = bytes(range(256)) * (mib * 4096)
        sql, _ = _columns(conn, exchanges_t, list(values))
        conn.exec_driver_sql(sql, tuple(values.values()))
        return int(conn.exec_driver_sql(f"SELECT max(id) FROM {exchanges_t.name}").scalar_one())


class _Viewer:
    """`ssetape web` on ``db`` in a process of its own: its URL, RSS and CPU time."""

    def __init__(self, db: str, max_live: int | None) -> None:
        ssetape = str(Path(sys.executable).parent / "ssetape")
        extra = [] if max_live is None else ["--max-live", str(max_live)]
        self.proc = subprocess.Popen(
            [ssetape, "web", "--db", db, "--port", "0", *extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        found = re.search(r"listening on (http://[^;\s]+)", line)
        assert found, line
        self.url = found.group(1)
        self.log: list[bytes] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        self.log += list(self.proc.stdout)

    def status(self, key: str) -> int:
        """A VmRSS/VmHWM line of /proc/PID/status, in KiB."""
        text = Path(f"/proc/{self.proc.pid}/status").read_text()
        found = re.search(rf"^{key}:\s+(\d+) kB", text, re.M)
        return int(found.group(1)) if found else 0

    def cpu_s(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


async def _live_client(url: str, answers: dict[str, int], stop: asyncio.Event) -> None:
    """One live viewer: asks for the list's feed and reads what it is sent until ``stop``."""
    host, port = url.removeprefix("http://").split(":")
    try:
        reader, writer = await asyncio.open_connection(host, int(port))
    except OSError:
        answers["refused"] += 1
        return
    try:
        writer.write(f"GET /live?after=0 HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        head = await asyncio.wait_for(reader.readline(), 60)
        status = head.split(b" ")[1].decode() if head.count(b" ") >= 2 else "none"
        answers[status] = answers.get(status, 0) + 1
        while not stop.is_set():
            read = asyncio.ensure_future(reader.read(65536))
            done, _ = await asyncio.wait({read}, timeout=0.5)
            if not done:
                read.cancel()
                continue
            if not read.result():
                answers["closed"] = answers.get("closed", 0) + 1
                return
    except (OSError, TimeoutError):
        answers["failed"] = answers.get("failed", 0) + 1
    finally:
        writer.close()


def live_viewers(args: argparse.Namespace, db: str) -> tuple[float, list[float], dict[str, int]]:
    """The live-viewers run (see the module's text): the viewer's peak RSS (MiB), the list
    page's times (ms) and how the clients were answered (``bench.bench_bounds`` judges them)."""
    t0 = time.perf_counter()
    build(db, args.exchanges, 0)
    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=args.exchanges + 120)
    add_big_body(db, args.body_mib, start)
    print(f"store: {args.exchanges:,} exchanges + 1 in flight with a {args.body_mib} MiB "
          f"response body, written in {time.perf_counter() - t0:.1f} s")  # fmt: skip
    viewer = _Viewer(db, args.max_live)
    try:
        idle_kib = viewer.status("VmRSS")
        answers: dict[str, int] = {"refused": 0}
        took: list[float] = []
        steady: list[tuple[float, float]] = []

        async def run() -> None:
            stop = asyncio.Event()
            clients = [
                asyncio.create_task(_live_client(viewer.url, answers, stop))
                for _ in range(args.live_clients)
            ]
            await asyncio.sleep(5)  # all connected, every feed past its first polls
            steady.append((viewer.cpu_s(), time.perf_counter()))
            async with httpx.AsyncClient(timeout=120) as client:
                for _ in range(args.rounds):
                    t = time.perf_counter()
                    r = await client.get(viewer.url + "/")
                    took.append((time.perf_counter() - t) * 1000)
                    assert r.status_code == 200, r.status_code
                    await asyncio.sleep(1)
            steady.append((viewer.cpu_s(), time.perf_counter()))
            stop.set()
            await asyncio.gather(*clients)

        cpu0, w0 = viewer.cpu_s(), time.perf_counter()
        asyncio.run(run())
        cpu, wall = viewer.cpu_s() - cpu0, time.perf_counter() - w0
        peak = viewer.status("VmHWM")
    finally:
        viewer.stop()
    shown = ", ".join(f"{k}: {v}" for k, v in sorted(answers.items()) if v)
    print(f"{args.live_clients} live clients ({shown}); max-live {args.max_live or 'default'}")
    print(f"viewer RSS: {idle_kib / 1024:.0f} MiB idle, peak {peak / 1024:.0f} MiB")
    (c0, t0), (c1, t1) = steady
    print(f"viewer CPU: {cpu:.1f} s in {wall:.1f} s; once all are connected {c1 - c0:.1f} s "
          f"in {t1 - t0:.1f} s")  # fmt: skip
    print(f"/ (first page) while they are connected: median {statistics.median(took):.1f} ms, "
          f"max {max(took):.1f} ms ({len(took)} rounds, over a socket)")  # fmt: skip
    errors = [line for line in b"".join(viewer.log).decode().splitlines() if line.strip()]
    if errors:
        print("viewer said:", *errors[:5], sep="\n  ")
    return peak / 1024, took, answers


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--exchanges", type=int, default=None)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--db", help="a PostgreSQL URL (default: a temporary SQLite file)")
    parser.add_argument("--live-clients", type=int, default=0)
    parser.add_argument("--body-mib", type=int, default=100)
    parser.add_argument("--max-live", type=int, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ssetape-bench-web-") as tmp:
        db = args.db or str(Path(tmp) / "web.db")
        if args.live_clients:
            args.exchanges = 1000 if args.exchanges is None else args.exchanges
            live_viewers(args, db)
            return 0
        args.exchanges = 1_000_000 if args.exchanges is None else args.exchanges
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
