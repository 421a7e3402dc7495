"""Recorder memory under long streams, side by side with plain mitmdump; events lost to kill -9.

    python -m bench.bench_memory [--events 1000000] [--streams 50] [--per-stream 20000]

A local upstream (a child process of this script) streams fixed-size SSE events as fast as
the proxy takes them, ``--batch`` events per write. Each proxy is a reverse proxy in front
of it: `ssetape record` (SQLite in a temporary folder, or ``--db``) and `mitmdump --set
stream_large_bodies=1`. While a scenario runs, the proxy's resident memory is sampled from
/proc/<pid>/status (VmRSS, the proxy's plus its recording process's) every 0.2 s:

- one stream of ``--events`` events; ``--streams`` concurrent streams of ``--per-stream``;
- "@20%": RSS once a fifth of the events went by (steady state); "growth" is peak minus it,
  i.e. what the remaining 80 % of the run added. Flat memory: growth near 0.
- after each `ssetape record` scenario the recorder is stopped cleanly and the store is
  counted: every event stored, none dropped.

kill -9: ``--kill-streams`` streams paced at one event per ``--kill-gap-ms`` each go
through `ssetape record`, which is SIGKILLed after ``--kill-after`` s (alone, then with its
recording process); the table compares the events the clients had received with the events
in the store.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
from sqlalchemy import func, select

from bench.bench_record import free_port, wait_port
from ssetape.storage.models import Event
from ssetape.storage.runs import Runs
from ssetape.storage.store import Store

BIN = Path(sys.executable).parent
EVENT = (
    b'data: {"choices":[{"index":0,"delta":{"content":" token"}}],"pad":"' + b"x" * 80 + b'"}\n\n'
)


# -- the upstream: fixed events as fast as the reader takes them -------------------------


async def _serve_one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return  # a port probe, or a client that went away
    length = re.search(rb"(?i)content-length:\s*(\d+)", head)
    if length:
        await reader.readexactly(int(length.group(1)))
    target = head.split(b" ", 2)[1].decode()
    q = {k: float(v[0]) for k, v in parse_qs(urlsplit(target).query).items()}
    events, batch, gap = int(q.get("events", 1000)), int(q.get("batch", 1)), q.get("gap", 0.0)
    writer.write(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    block = EVENT * batch
    framed = b"%x\r\n%s\r\n" % (len(block), block)
    try:
        sent = 0
        while sent < events:
            n = min(batch, events - sent)
            writer.write(framed if n == batch else b"%x\r\n%s\r\n" % (n * len(EVENT), EVENT * n))
            sent += n
            await writer.drain()
            if gap:
                await asyncio.sleep(gap)
        writer.write(b"0\r\n\r\n")
        await writer.drain()
    except ConnectionError:
        pass
    writer.close()


def serve(port: int) -> None:
    async def main() -> None:
        server = await asyncio.start_server(_serve_one, "127.0.0.1", port, backlog=1024)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


# -- processes and sampling ----------------------------------------------------------


def rss_mib(pid: int) -> float:
    """RSS of a proxy and its child processes (ssetape's recording process), summed."""
    total = 0.0
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) / 1024
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            children = [int(c) for c in f.read().split()]
    except OSError:  # it just exited
        return total
    return total + sum(rss_mib(c) for c in children)


@contextmanager
def proxy(cmd: list[str], port: int, log: str) -> Iterator[subprocess.Popen[bytes]]:
    with open(log, "ab") as out:  # a file, not a pipe: an unread pipe would stall the proxy
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_port(port)
        yield p
    finally:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(120)
            except subprocess.TimeoutExpired:
                p.kill()


@dataclass
class Progress:
    received: int = 0  # events, all streams
    samples: list[tuple[int, float]] = field(default_factory=list)  # (events so far, MiB)


def sample(pid: int, progress: Progress, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            progress.samples.append((progress.received, rss_mib(pid)))
        except OSError:
            return
        stop.wait(0.2)


async def read_stream(client: httpx.AsyncClient, url: str, progress: Progress) -> int:
    count, last = 0, b""
    async with client.stream("POST", url, content=b'{"stream":true}') as r:
        async for chunk in r.aiter_raw():
            # Events end with a blank line; "\n\n\n" never occurs in this stream.
            n = chunk.count(b"\n\n") + (last == b"\n" and chunk[:1] == b"\n")
            count += n
            progress.received += n
            last = chunk[-1:]
    return count


async def run_streams(base: str, streams: int, events: int, batch: int, gap: float,
                      progress: Progress) -> int:  # fmt: skip
    url = f"{base}/stream?events={events}&batch={batch}&gap={gap}"
    limits = httpx.Limits(max_connections=streams + 1)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        counts = await asyncio.gather(*(read_stream(client, url, progress)
                                        for _ in range(streams)))  # fmt: skip
    return sum(counts)


@dataclass
class Result:
    proxy: str
    scenario: str
    events: int
    seconds: float
    idle: float
    at20: float
    peak: float
    end: float
    stored: str = ""


def measure(name: str, scenario: str, pid: int, base: str, streams: int, events: int,
            batch: int) -> Result:  # fmt: skip
    progress, stop = Progress(), threading.Event()
    idle = rss_mib(pid)
    sampler = threading.Thread(target=sample, args=(pid, progress, stop), daemon=True)
    sampler.start()
    t0 = time.perf_counter()
    got = asyncio.run(run_streams(base, streams, events, batch, 0.0, progress))
    seconds = time.perf_counter() - t0
    time.sleep(1.0)  # the writer may still drain its queue: part of the footprint
    stop.set()
    sampler.join()
    progress.samples.append((got, rss_mib(pid)))
    total = streams * events
    assert got == total, f"{name}: client got {got} of {total} events"
    at20 = next((m for n, m in progress.samples if n >= total * 0.2), idle)
    peak = max(m for _, m in progress.samples)
    return Result(name, scenario, total, seconds, idle, at20, peak, progress.samples[-1][1])


# -- the runs ------------------------------------------------------------------------


def stored_counts(db: str) -> tuple[int, int]:
    """(events in the store, events its recorders counted as lost)."""
    store = Store.open(db, create=False)
    try:
        with store.Session() as s:
            n = s.scalar(select(func.count()).select_from(Event)) or 0
        return n, int(Runs(store).totals()["events_lost"])
    finally:
        store.close()


def ssetape_cmd(up: str, port: int, db: str, conf: str) -> list[str]:
    return [str(BIN / "ssetape"), "record", "--mode", f"reverse:{up}", "--port", str(port),
            "--db", db, "--confdir", conf]  # fmt: skip


def mitmdump_cmd(up: str, port: int, conf: str) -> list[str]:
    return [str(BIN / "mitmdump"), "-q", "--mode", f"reverse:{up}", "--listen-host",
            "127.0.0.1", "--listen-port", str(port), "--set", "stream_large_bodies=1",
            "--set", f"confdir={conf}"]  # fmt: skip


def memory_runs(args: argparse.Namespace, up: str, tmp: str) -> list[Result]:
    results: list[Result] = []
    scenarios = [
        ("1 stream", 1, args.events),
        (f"{args.streams} streams", args.streams, args.per_stream),
    ]
    for scenario, streams, events in scenarios:
        for name in ("mitmdump", "ssetape record"):
            port = free_port()
            db = args.db or f"{tmp}/mem-{port}.db"
            recording = name == "ssetape record"
            cmd = (
                ssetape_cmd(up, port, db, f"{tmp}/conf")
                if recording
                else mitmdump_cmd(up, port, f"{tmp}/conf")
            )
            with proxy(cmd, port, f"{tmp}/{port}.log") as p:
                base = f"http://127.0.0.1:{port}"
                res = measure(name, scenario, p.pid, base, streams, events, args.batch)
            if recording:
                n, lost = stored_counts(db)
                res.stored = f"{n:,} stored, {lost:,} lost"
            print(f"{scenario}, {name}: {res.events:,} events in {res.seconds:.1f} s, "
                  f"peak {res.peak:.0f} MiB {res.stored}", file=sys.stderr)  # fmt: skip
            results.append(res)
    return results


def children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] == "Z"
    except OSError:
        return True


def kill_run(args: argparse.Namespace, up: str, tmp: str, *, both: bool) -> tuple[int, int, float]:
    """(events the clients received, events stored, event rate) for one kill -9 of the
    proxy, or (``both``) of the proxy and its recording process at once."""
    port = free_port()
    db = args.db or f"{tmp}/kill-{port}.db"
    progress = Progress()
    with proxy(ssetape_cmd(up, port, db, f"{tmp}/conf"), port, f"{tmp}/{port}.log") as p:
        base = f"http://127.0.0.1:{port}"

        def clients() -> None:
            with contextlib.suppress(Exception):  # the proxy dies under them
                asyncio.run(run_streams(base, args.kill_streams, 10**9, 1,
                                        args.kill_gap_ms / 1000, progress))  # fmt: skip

        t = threading.Thread(target=clients, daemon=True)
        t.start()
        time.sleep(args.kill_after)
        workers = children(p.pid)
        if both:  # frozen first, so that it cannot store anything after the proxy's end
            for w in workers:
                os.kill(w, signal.SIGSTOP)
        p.send_signal(signal.SIGKILL)
        p.wait()
        for w in workers:
            if both:
                os.kill(w, signal.SIGKILL)
            while not gone(w):  # the recording process finishes what it was handed
                time.sleep(0.05)
        t.join(30)
    # Whatever the clients got, the proxy had passed on (and captured) before it died.
    stored, _ = stored_counts(db)
    return progress.received, stored, progress.received / args.kill_after


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1_000_000, help="events in the single stream")
    ap.add_argument("--streams", type=int, default=50)
    ap.add_argument("--per-stream", type=int, default=20_000)
    ap.add_argument("--batch", type=int, default=8, help="events per upstream write")
    ap.add_argument("--kill-streams", type=int, default=20)
    ap.add_argument("--kill-gap-ms", type=float, default=5.0)
    ap.add_argument("--kill-after", type=float, default=4.0)
    ap.add_argument("--kill-rounds", type=int, default=3)
    ap.add_argument("--db", help="store for ssetape record (default: SQLite in a temp folder)")
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve)
        return
    tmp = tempfile.mkdtemp(prefix="ssetape-bench-mem-")
    up_port = free_port()
    upstream = subprocess.Popen(
        [sys.executable, "-m", "bench.bench_memory", "--serve", str(up_port)]
    )
    try:
        wait_port(up_port)
        up = f"http://127.0.0.1:{up_port}"
        results = memory_runs(args, up, tmp)
        kills = [(both, kill_run(args, up, tmp, both=both))
                 for both in (False, True) for _ in range(args.kill_rounds)]  # fmt: skip
    finally:
        upstream.terminate()
        upstream.wait()

    print(f"\n{len(EVENT)}-byte events, {args.batch} per upstream write; RSS in MiB\n")
    print("| scenario | proxy | events | time | events/s | RSS idle | RSS @20% | peak | "
          "growth after 20% | peak vs mitmdump | store after clean stop |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    plain = {r.scenario: r for r in results if r.proxy == "mitmdump"}
    for r in results:
        ratio = r.peak / plain[r.scenario].peak
        print(f"| {r.scenario} | {r.proxy} | {r.events:,} | {r.seconds:.1f} s | "
              f"{r.events / r.seconds:,.0f} | {r.idle:.0f} | {r.at20:.0f} | {r.peak:.0f} | "
              f"{r.peak - r.at20:+.0f} | {ratio:.2f} | {r.stored or '-'} |")  # fmt: skip
    print(f"\nkill -9 after {args.kill_after:g} s, {args.kill_streams} streams, one event per "
          f"{args.kill_gap_ms:g} ms each\n")  # fmt: skip
    print("| killed | events received by clients | events stored | lost | lost as time |")
    print("|---|---:|---:|---:|---:|")
    for both, (received, stored, rate) in kills:
        lost = received - stored
        who = "proxy and recording process" if both else "proxy"
        print(f"| {who} | {received:,} | {stored:,} | {lost:,} | {lost / rate * 1000:.0f} ms |")


if __name__ == "__main__":
    main()
