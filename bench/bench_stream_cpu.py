"""CPU per event and per stream: the proxy process and the recording process of `ssetape
record`, side by side, with plain mitmdump's proxy for the part that is mitmproxy's own
(issues 40 and 43).

    python -m bench.bench_stream_cpu [--rounds 3] [--streams 200] [--events 80]
                                     [--clients 20] [--speed 2] [--db URL]
                                     [--baseline SRC]

Both proxies run in reverse mode in front of one simulator (`ssetape simulate`, a process
of its own) that sends chat streams (``sim-chat``, usage included) of about ``--events``
events, a token every 20 ms / ``--speed``: each event arrives on its own, as from a real
API (with no delays, chunks would be read several at a time and cost less than they do).
``--clients`` clients stream one request after another until ``--streams`` streams are
done. CPU time (user + system, /proc/PID/stat) of each process is read before and after;
for ssetape the "after" waits until every exchange is stored and the recording process is
idle. Rounds interleave the targets; the medians are reported, per event (the events the
clients parsed) and per stream (what each stream costs once: its connection, the request's
parsing, the exchange's row, its analysis, besides its events).

``--baseline SRC`` adds a third target: `ssetape record` run from another copy of the
package (``SRC`` on PYTHONPATH: a folder holding an ``ssetape`` package, e.g. the code
before a change, with ``addons``, ``storage`` and ``migrations`` inside it as installed),
so a change is measured against what it changes in one run, on the same load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from contextlib import ExitStack

import httpx
import orjson

from bench.bench_record import BIN, cpu_seconds, free_port, process
from ssetape.framing.sse import SseParser
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store

CHAT_OVERHEAD = 4  # events of a chat stream besides its tokens: role, finish, usage, [DONE]
BASELINE = "ssetape record (baseline)"


def chat(events: int, tag: str) -> bytes:
    return orjson.dumps(
        {
            "model": "sim-chat",
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": max(1, events - CHAT_OVERHEAD),
            "messages": [{"role": "user", "content": f"cpu per stream {tag}"}],
        }
    )


def streams(base: str, n: int, clients: int, events: int, tag: str) -> list[int]:
    """``n`` streams through ``base`` by ``clients`` clients; the events of each."""
    counts: list[int] = []
    lock = threading.Lock()
    left = [n]

    def client(c: int) -> None:
        with httpx.Client(timeout=120) as http:
            while True:
                with lock:
                    if left[0] == 0:
                        return
                    left[0] -= 1
                    i = left[0]
                parser, got = SseParser(), 0
                body = chat(events, f"{tag}-{c}-{i}")
                with http.stream("POST", base + "/v1/chat/completions", content=body) as r:
                    for chunk in r.iter_raw():
                        got += len(parser.feed(chunk))
                with lock:
                    counts.append(got + len(parser.close()))

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return counts


def settled(pid: int, db: str, expected: int, timeout: float = 120) -> None:
    """Until ``expected`` exchanges are stored finished and the recording process is idle."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with Store.open_read_only(db) as store:
            done = [x for x in Queries(store).exchanges() if x.state != "recording"]
        if len(done) >= expected:
            break
        time.sleep(0.2)
    before = cpu_seconds(pid)[1]
    while time.monotonic() < end:  # its last flush and analysis
        time.sleep(0.5)
        now = cpu_seconds(pid)[1]
        if now - before < 0.01:
            return
        before = now


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--streams", type=int, default=200, help="streams per target per round")
    ap.add_argument("--events", type=int, default=80, help="events per stream, about")
    ap.add_argument("--clients", type=int, default=20, help="streams at once")
    ap.add_argument("--speed", type=float, default=2.0, help="the simulator's speed")
    ap.add_argument("--db", help="ssetape's store (default: an SQLite file in a temp folder)")
    ap.add_argument("--baseline", metavar="SRC", help="also `ssetape record` from SRC (see above)")
    args = ap.parse_args()
    if args.baseline and args.db:
        raise SystemExit("--baseline compares on SQLite stores of their own: drop --db")
    tmp = tempfile.mkdtemp(prefix="ssetape-bench-")
    db = args.db or f"{tmp}/stream-cpu.db"
    sim_port, dump_port = free_port(), free_port()
    sim = f"http://127.0.0.1:{sim_port}"
    targets = {
        "mitmdump": [str(BIN / "mitmdump"), "-q", "--mode", f"reverse:{sim}", "--listen-host",
                     "127.0.0.1", "--listen-port", str(dump_port), "--set",
                     "stream_large_bodies=1", "--set", f"confdir={tmp}/conf"],
    }  # fmt: skip
    ports = {"mitmdump": dump_port}
    stores: dict[str, str] = {}
    recorders: list[tuple[str, str | None]] = [("ssetape record", None)]
    if args.baseline:
        recorders.insert(0, (BASELINE, os.path.abspath(args.baseline)))
    for name, src in recorders:
        ports[name] = port = free_port()
        # Each its own store, of the same size at every round.
        stores[name] = store = db if src is None else f"{tmp}/baseline.db"
        # `env` execs ssetape in its own process: the pid read is the proxy's.
        env: list[str] = ["env", f"PYTHONPATH={src}"] if src is not None else []
        targets[name] = [*env, str(BIN / "ssetape"), "record", "--mode", f"reverse:{sim}",
                         "--port", str(port), "--db", store,
                         "--confdir", f"{tmp}/conf"]  # fmt: skip
    cpu: dict[str, list[tuple[float, float]]] = {name: [] for name in targets}
    sizes: list[float] = []
    stored = 0
    with ExitStack() as stack:
        simulate = [str(BIN / "ssetape"), "simulate", "--speed", repr(args.speed)]
        stack.enter_context(process([*simulate, "--port", str(sim_port)], sim_port))
        pids = {
            name: stack.enter_context(process(cmd, ports[name])) for name, cmd in targets.items()
        }
        for name in targets:  # warm-up: imports, certificates, the store's first writes
            streams(f"http://127.0.0.1:{ports[name]}", 20, 5, args.events, "warm")
        stored += 20
        for r in range(args.rounds):
            for name, pid in pids.items():
                base = f"http://127.0.0.1:{ports[name]}"
                if name in stores:
                    settled(pid, stores[name], stored)
                before = cpu_seconds(pid)
                counts = streams(base, args.streams, args.clients, args.events, f"{r}")
                if name in stores:
                    settled(pid, stores[name], stored + args.streams)
                after = cpu_seconds(pid)
                proxy, rec = (a - b for a, b in zip(after, before, strict=True))
                # Per event: of the events the clients got in this round.
                events = args.streams * statistics.mean(counts)
                cpu[name].append((proxy / events, rec / events))
                sizes.append(statistics.mean(counts))
                print(f"  {name}: {proxy / events * 1e6:.1f} µs + "
                      f"{rec / events * 1e6:.1f} µs per event", file=sys.stderr)  # fmt: skip
            stored += args.streams
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    report(cpu, statistics.mean(sizes), args, "PostgreSQL" if "://" in db else "SQLite")


def report(
    cpu: dict[str, list[tuple[float, float]]], events: float, args: argparse.Namespace, store: str
) -> None:
    """The table: per event, then per stream (the same medians times the events of one)."""
    print(f"\n{args.rounds} rounds x {args.streams} chat streams of {events:.0f} events, "
          f"{args.clients} at once, simulator speed {args.speed:g}; store {store}; CPU time, "
          "median of rounds\n")  # fmt: skip
    print("| target | proxy process per event | recording process per event | both per event "
          "| proxy over mitmdump per event | both per stream |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|")
    alone = statistics.median(p for p, _ in cpu["mitmdump"])
    for name, rounds in cpu.items():
        proxy = statistics.median(p for p, _ in rounds)
        rec = statistics.median(r for _, r in rounds)
        both = proxy + rec
        recording = f"{rec * 1e6:.1f} µs" if name != "mitmdump" else "-"
        over = f"{(proxy - alone) * 1e6:+.1f} µs" if name != "mitmdump" else "-"
        print(f"| {name} | {proxy * 1e6:.1f} µs | {recording} | {both * 1e6:.1f} µs | {over} "
              f"| {both * events * 1e3:.1f} ms |")  # fmt: skip


if __name__ == "__main__":
    main()
