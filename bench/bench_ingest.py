"""Fleet ingest: 1, 2 and 4 recording processes writing into one store at once.

    python -m bench.bench_ingest --db postgresql+psycopg://postgres@127.0.0.1:5432/test
                                 [--writers 1,2,4] [--events 60000] [--streams 20]
                                 [--rounds 3] [--only REGEX]

Each writer is a real recording process's core (`RecordWorker`: SSE parsing, live analysis,
the writer thread, the store) in a process of its own, fed the messages `ssetape record`'s
proxy would send for ``--streams`` chat streams of ``--events`` events in all, as fast as it
takes them. They start together; the aggregate is every writer's events over the wall time
from the start to the last commit (the median of ``--rounds`` runs is shown; "lost" adds up
every run). Each writer's final counts must say nothing was lost, and the store must then
hold every event (checked by counting rows).

The PostgreSQL runs go into a database of their own (``ssetape_bench_ingest``, made afresh
on the server of ``--db``): as migrated; with the foreign key from events to exchanges that
migration 0009 dropped (its per-row check, side by side); and with ``synchronous_commit=off``
(a commit then waits for no WAL flush), to tell commit latency from CPU. A SQLite file beside
them is the single-file reference, and again without its text index (migration 0012's FTS5
table and the triggers that index each exchange's text as it is written), side by side.
CPU, as a share of all the machine's cores over the wall time: the writers' own (all
threads), and the PostgreSQL server's processes' (from /proc).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, func, select, text
from sqlalchemy.engine import make_url

from bench.bench_worker import BATCH, messages
from ssetape.recording.protocol import WorkerConfig
from ssetape.recording.worker import RecordWorker, tune_gc
from ssetape.storage.models import Event
from ssetape.storage.store import Store
from ssetape.storage.text_index import TABLE, TRIGGERS

BENCH_DB = "ssetape_bench_ingest"
NO_SYNC = "-c synchronous_commit=off"  # a commit waits for no WAL flush


@dataclass(frozen=True)
class Result:
    started: float
    ended: float
    cpu: float
    stored: int
    lost: int


def writer(db: str, n: int, events: int, streams: int, go: Any, out: Any) -> None:
    """One recording process's core: fed as fast as it takes messages, then stopped."""
    msgs = [(m[0], f"w{n}-{m[1]}", *m[2:]) for m in messages(events, streams, per_chunk=3)]
    worker = RecordWorker(WorkerConfig(db=db, max_pending=10**7, active=True))
    worker.start()
    tune_gc()
    go.wait()
    t0, cpu0 = time.perf_counter(), time.process_time()
    for start in range(0, len(msgs), BATCH):
        worker.handle_batch(msgs[start : start + BATCH])
    final = worker.stop()  # everything committed, and the run row with its counts
    took = time.process_time() - cpu0
    lost = final.events_lost + final.exchanges_lost + final.store_errors
    out.put(Result(t0, time.perf_counter(), took, final.events_recorded, lost))


def server_cpu() -> float:
    """CPU seconds used so far by this machine's PostgreSQL processes (all of them)."""
    total, tick = 0, os.sysconf("SC_CLK_TCK")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue  # gone meanwhile
        name, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :]
        if name == "postgres":
            fields = rest.split()
            # Its own and its reaped children's: a backend's time reaches the postmaster
            # when the connection closes and it exits.
            total += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    return total / tick


def run(db: str, writers: int, events: int, streams: int) -> tuple[float, float, float, int, int]:
    """Aggregate events/s, the writers' and the database server's CPU shares of the
    machine, events in the store, events lost by the writers' own counts."""
    ctx = mp.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=writer, args=(db, n, events, streams, go, out))
             for n in range(writers)]  # fmt: skip
    for p in procs:
        p.start()
    time.sleep(3.0)  # each has built its messages and opened the store
    server0 = server_cpu()
    go.set()
    results = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    time.sleep(0.5)  # their backends exit and are reaped: their CPU is the postmaster's now
    server = server_cpu() - server0
    wall = max(r.ended for r in results) - min(r.started for r in results)
    stored = sum(r.stored for r in results)
    with Store.open(db, create=False) as store, store.engine.connect() as conn:
        rows = conn.scalar(select(func.count()).select_from(Event)) or 0
    assert rows == stored == writers * events, (rows, stored, writers * events)
    cores = os.cpu_count() or 1
    cpu = sum(r.cpu for r in results) / wall / cores
    return stored / wall, cpu, server / wall / cores, rows, sum(r.lost for r in results)


def fresh_pg(url: str, options: str = "") -> str:
    """A new empty database on the server of ``url``; its URL (with ``options``)."""
    admin = make_url(url).set(database="postgres")
    engine = create_engine(admin, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)"))
        conn.execute(text(f"CREATE DATABASE {BENCH_DB}"))
    engine.dispose()
    target = make_url(url).set(database=BENCH_DB)
    if options:
        target = target.update_query_dict({"options": options})
    db = target.render_as_string(hide_password=False)
    Store.open(db).close()  # migrated once, before the writers race
    return db


def with_foreign_key(url: str) -> str:
    """A fresh database whose events keep the foreign key migration 0009 dropped: the cost
    of its check per row, side by side."""
    db = fresh_pg(url)
    with Store.open(db, create=False) as store, store.engine.begin() as conn:
        conn.execute(
            text(
                "ALTER TABLE events ADD CONSTRAINT fk_events_exchange_id_exchanges "
                "FOREIGN KEY (exchange_id) REFERENCES exchanges (id) ON DELETE CASCADE"
            )
        )
    return db


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", required=True, help="a PostgreSQL URL (its server is used)")
    ap.add_argument("--writers", default="1,2,4")
    ap.add_argument("--events", type=int, default=60_000, help="events per writer")
    ap.add_argument("--streams", type=int, default=20, help="streams per writer")
    ap.add_argument("--rounds", type=int, default=3, help="runs of each; the median is shown")
    ap.add_argument("--only", metavar="REGEX", help="only the stores whose name matches")
    args = ap.parse_args()
    counts = [int(n) for n in args.writers.split(",")]
    print(f"{args.events:,} chat events per writer in {args.streams} streams; "
          f"{os.cpu_count()} cores\n")  # fmt: skip
    print("| store | writers | events/s (all) | writers' CPU | PostgreSQL's CPU | stored | lost |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    targets: list[tuple[str, Any]] = [
        ("PostgreSQL", lambda: fresh_pg(args.db)),
        ("PostgreSQL, events' foreign key (before 0009)", lambda: with_foreign_key(args.db)),
        ("PostgreSQL, synchronous_commit=off", lambda: fresh_pg(args.db, NO_SYNC)),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        targets.append(("SQLite (one file)", lambda: _fresh_sqlite(Path(tmp))))
        targets.append(
            (
                "SQLite, without the text index (before 0012)",
                lambda: _fresh_sqlite(Path(tmp), text_index=False),
            )
        )
        for name, make in targets:
            if args.only and not re.search(args.only, name):
                continue
            for n in counts:
                runs = sorted(run(make(), n, args.events, args.streams) for _ in range(args.rounds))
                rate, cpu, server, rows, _ = runs[len(runs) // 2]
                lost = sum(r[4] for r in runs)
                pg = f"{server:.0%}" if name.startswith("PostgreSQL") else "-"
                print(f"| {name} | {n} | {rate:,.0f} | {cpu:.0%} | {pg} | {rows:,} | {lost} |",
                      flush=True)  # fmt: skip


def _fresh_sqlite(tmp: Path, *, text_index: bool = True) -> str:
    path = tmp / "ingest.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    with Store.open(str(path)) as store:
        if not text_index:  # what its triggers cost each exchange written (migration 0012)
            with store.engine.begin() as conn:
                for name in TRIGGERS:
                    conn.exec_driver_sql(f"DROP TRIGGER {name}")
                conn.exec_driver_sql(f"DROP TABLE {TABLE}")
    return str(path)


if __name__ == "__main__":
    main()
