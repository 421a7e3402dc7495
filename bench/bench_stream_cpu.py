"""CPU per stream: the proxy process and the recording process of `ssetape record`, side by
side, with plain mitmdump's proxy for the part that is mitmproxy's own (issue 40).

    python -m bench.bench_stream_cpu [--rounds 3] [--streams 200] [--events 80]
                                     [--clients 20] [--speed 2] [--db URL]

Both proxies run in reverse mode in front of one simulator (`ssetape simulate`, a process
of its own) that sends chat streams (``sim-chat``, usage included) of about ``--events``
events, a token every 20 ms / ``--speed``: each event arrives on its own, as from a real
API (with no delays, chunks would be read several at a time and cost less than they do).
``--clients`` clients stream one request after another until ``--streams`` streams are
done. CPU time (user + system, /proc/PID/stat) of each process is read before and after;
for ssetape the "after" waits until every exchange is stored and the recording process is
idle. Rounds interleave the targets; the medians are reported. Sizing uses these figures
per stream where events per second would hide the per-stream costs (connections, request
parsing, the exchange's row, its analysis).
"""

from __future__ import annotations

import argparse
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
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="ssetape-bench-")
    db = args.db or f"{tmp}/stream-cpu.db"
    sim_port, dump_port, rec_port = free_port(), free_port(), free_port()
    sim = f"http://127.0.0.1:{sim_port}"
    targets = {
        "mitmdump": [str(BIN / "mitmdump"), "-q", "--mode", f"reverse:{sim}", "--listen-host",
                     "127.0.0.1", "--listen-port", str(dump_port), "--set",
                     "stream_large_bodies=1", "--set", f"confdir={tmp}/conf"],
        "ssetape record": [str(BIN / "ssetape"), "record", "--mode", f"reverse:{sim}", "--port",
                           str(rec_port), "--db", db, "--confdir", f"{tmp}/conf"],
    }  # fmt: skip
    ports = {"mitmdump": dump_port, "ssetape record": rec_port}
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
                if name == "ssetape record":
                    settled(pid, db, stored)
                before = cpu_seconds(pid)
                counts = streams(base, args.streams, args.clients, args.events, f"{r}")
                if name == "ssetape record":
                    stored += args.streams
                    settled(pid, db, stored)
                after = cpu_seconds(pid)
                proxy, rec = (a - b for a, b in zip(after, before, strict=True))
                cpu[name].append((proxy / args.streams, rec / args.streams))
                sizes.append(statistics.mean(counts))
                print(f"  {name}: {proxy / args.streams * 1e3:.1f} ms + "
                      f"{rec / args.streams * 1e3:.1f} ms per stream", file=sys.stderr)  # fmt: skip
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)

    events = statistics.mean(sizes)
    store = "PostgreSQL" if "://" in db else "SQLite"
    print(f"\n{args.rounds} rounds x {args.streams} chat streams of {events:.0f} events, "
          f"{args.clients} at once, simulator speed {args.speed:g}; store {store}; CPU time "
          "per stream, median of rounds\n")  # fmt: skip
    print("| target | proxy process | recording process | both | proxy's share "
          "| per event, both |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|")
    for name, rounds in cpu.items():
        proxy = statistics.median(p for p, _ in rounds)
        rec = statistics.median(r for _, r in rounds)
        both = proxy + rec
        print(f"| {name} | {proxy * 1e3:.1f} ms | {rec * 1e3:.1f} ms | {both * 1e3:.1f} ms "
              f"| {proxy / both:.0%} | {both / events * 1e6:.0f} µs |")  # fmt: skip


if __name__ == "__main__":
    main()
