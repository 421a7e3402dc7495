"""What `--metrics` and `--otlp` cost a recording proxy, side by side in one run: `ssetape
record` with and without them, each a reverse proxy in front of the same simulator.

    python -m bench.bench_metrics [--rounds 5] [--events 40] [--long 20000] [--wide 1000]
        [--with metrics|otlp|both] [--short 200]

With ``--otlp``, spans go to a local OTLP/HTTP sink in this process (it answers 200 to each
export and counts the spans' bytes). ``--short`` short streams (20 events, 20 at a time) give
the cost per exchange, where a span is made: exchanges/s and CPU per exchange.

With ``--metrics``, a scraper reads /metrics every ``--scrape`` seconds throughout (a
Prometheus at a 1 s interval is fifteen times as eager as the default). Per round, both
targets back to back: TTFE (the first event's lateness against the simulator's planned send
time, httpx client, simulator speed 1) and, with the simulator's delays removed, events/s and
CPU per event of the proxy process and of its recording process (1 stream of ``--long``
events and 20 of ``--wide``). The ratio with/without is taken per round, its median and range
reported.
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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

from bench.bench_record import BIN, cpu_seconds, free_port, latency, process, throughput


def scraper(url: str, every: float, stop: threading.Event, sizes: list[int]) -> None:
    with httpx.Client(timeout=30) as c:
        while not stop.wait(every):
            r = c.get(url + "/metrics")
            sizes.append(len(r.content))


def otlp_sink(received: list[int]) -> str:
    """A local OTLP/HTTP endpoint that takes every export (its bytes counted)."""

    class Sink(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(len(self.rfile.read(int(self.headers["content-length"] or 0))))
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


FLAGS = {"metrics": "--metrics", "otlp": "--otlp", "both": "--metrics --otlp"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--events", type=int, default=40)
    ap.add_argument("--long", type=int, default=20_000, help="events in the 1-stream run")
    ap.add_argument("--wide", type=int, default=1_000, help="events per stream, 20 streams")
    ap.add_argument("--scrape", type=float, default=1.0, help="seconds between two scrapes")
    ap.add_argument("--with", dest="flags", choices=sorted(FLAGS), default="metrics")
    ap.add_argument("--short", type=int, default=200, help="short streams (20 events each)")
    args = ap.parse_args()
    spans: list[int] = []
    # Every recorder inherits it; only those given --otlp send.
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = otlp_sink(spans)
    tmp = tempfile.mkdtemp(prefix="ssetape-bench-metrics-")
    sim_port, fast_port = free_port(), free_port()
    sim = [str(BIN / "ssetape"), "simulate", "--speed"]
    names = ["without", FLAGS[args.flags]]
    ttfe: dict[str, list[float]] = {n: [] for n in names}
    rate: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[tuple[float, float]]] = {n: [] for n in names}  # per event, µs
    per_x: dict[str, list[float]] = {n: [] for n in names}  # short exchanges/s
    cpu_x: dict[str, list[float]] = {n: [] for n in names}  # both processes, µs per exchange
    stop, sizes = threading.Event(), []
    with ExitStack() as stack:
        stack.enter_context(process([*sim, "1", "--port", str(sim_port)], sim_port))
        stack.enter_context(process([*sim, "1000", "--port", str(fast_port)], fast_port))
        bases: dict[tuple[str, str], str] = {}
        pids: dict[str, int] = {}
        for up_port, label in ((sim_port, "latency"), (fast_port, "throughput")):
            up = f"http://127.0.0.1:{up_port}"
            for name in names:
                port = free_port()
                cmd = [str(BIN / "ssetape"), "record", "--mode", f"reverse:{up}", "--port",
                       str(port), "--db", f"{tmp}/{label}-{port}.db",
                       "--confdir", f"{tmp}/conf"]  # fmt: skip
                if "--otlp" in name:
                    cmd += ["--otlp"]
                if "--metrics" in name:
                    metrics = free_port()
                    cmd += ["--metrics", f"127.0.0.1:{metrics}"]
                    thread = threading.Thread(
                        target=scraper,
                        args=(f"http://127.0.0.1:{metrics}", args.scrape, stop, sizes),
                        daemon=True,
                    )
                pid = stack.enter_context(process(cmd, port))
                if "--metrics" in name:
                    thread.start()
                if label == "throughput":
                    pids[name] = pid
                bases[(name, label)] = f"http://127.0.0.1:{port}"
        stack.callback(stop.set)
        events = args.long + 20 * args.wide
        for r in range(args.rounds):
            for name in names if r % 2 == 0 else reversed(names):
                res = latency(bases[(name, "latency")], 3, args.events, False)
                ttfe[name].append(res["first_p50"])
                base = bases[(name, "throughput")]
                throughput(base, 1, 200)  # warm-up
                time.sleep(0.5)
                before = cpu_seconds(pids[name])
                t0 = time.perf_counter()
                throughput(base, 1, args.long)
                throughput(base, 20, args.wide)
                rate[name].append(events / (time.perf_counter() - t0))
                time.sleep(1.0)  # the recording process stores the rest
                after = cpu_seconds(pids[name])
                proxy, rec = (a - b for a, b in zip(after, before, strict=True))
                cpu[name].append((proxy / events * 1e6, rec / events * 1e6))
                before = cpu_seconds(pids[name])
                t0 = time.perf_counter()
                for _ in range(max(args.short // 20, 1)):
                    throughput(base, 20, 20)
                per_x[name].append(max(args.short // 20, 1) * 20 / (time.perf_counter() - t0))
                time.sleep(1.0)
                after = cpu_seconds(pids[name])
                cpu_x[name].append(sum(after) - sum(before))
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)

    def ratio(values: list[float], base: list[float]) -> str:
        rs = [v / b for v, b in zip(values, base, strict=True)]
        return f"{statistics.median(rs):.3f} ({min(rs):.3f}-{max(rs):.3f})"

    med = statistics.median
    print(f"\n{args.rounds} interleaved rounds; TTFE: 3 streams x {args.events} events at "
          f"simulator speed 1 (httpx); CPU: 1 stream of {args.long:,} events and 20 of "
          f"{args.wide:,}; /metrics scraped every {args.scrape:g} s "
          f"({med(sizes) / 1024 if sizes else 0:.0f} KiB each); {len(spans)} OTLP exports "
          f"({sum(spans) / 1024:.0f} KiB)\n")  # fmt: skip
    print(f"| figure | without | {names[1]} | ratio, median (range) |")
    print("|---|---:|---:|---:|")
    w, m = names
    print(f"| TTFE p50, ms late | {med(ttfe[w]):.2f} | {med(ttfe[m]):.2f} | "
          f"{ratio(ttfe[m], ttfe[w])} |")  # fmt: skip
    print(f"| events/s | {med(rate[w]):,.0f} | {med(rate[m]):,.0f} | {ratio(rate[m], rate[w])} |")
    for i, what in enumerate(("proxy process", "recording process")):
        a, b = [c[i] for c in cpu[w]], [c[i] for c in cpu[m]]
        print(f"| {what} CPU per event, µs | {med(a):.2f} | {med(b):.2f} | {ratio(b, a)} |")
    total_w = [p + q for p, q in cpu[w]]
    total_m = [p + q for p, q in cpu[m]]
    print(f"| both, CPU per event, µs | {med(total_w):.2f} | {med(total_m):.2f} | "
          f"{ratio(total_m, total_w)} |")  # fmt: skip
    n = max(args.short // 20, 1) * 20
    print(f"| short exchanges/s | {med(per_x[w]):,.0f} | {med(per_x[m]):,.0f} | "
          f"{ratio(per_x[m], per_x[w])} |")  # fmt: skip
    a, b = [c / n * 1e6 for c in cpu_x[w]], [c / n * 1e6 for c in cpu_x[m]]
    print(f"| both, CPU per short exchange, µs | {med(a):,.0f} | {med(b):,.0f} | {ratio(b, a)} |")


if __name__ == "__main__":
    main()
