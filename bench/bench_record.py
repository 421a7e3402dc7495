"""Recording overhead, side by side in one run: direct vs plain mitmdump vs `ssetape record`.

    python -m bench.bench_record [--rounds 5] [--events 40] [--throughput-only]
                                 [--long 20000] [--wide 1000]

Every target is a reverse proxy in front of the same simulator process (`ssetape simulate`);
a second plain mitmdump ("mitmdump again") shows how much two identical proxies differ.
Latency: for each event, client arrival time minus the simulator's planned send time, both
measured from when the request was sent (the planned time comes from the deterministic plan).
Clients: a bare httpx POST and the official `openai` SDK (which is where plain mitmdump was
seen to add ~40 ms to every event). Throughput: events/s with the simulator's delays removed,
for 1 stream of ``--long`` events and 20 concurrent streams of ``--wide`` events each. Runs
of about a second measure the steady state: with a few hundred events per stream the rate
is mostly connection set-up, and a 0.1 s run is mostly noise. Each round measures every
target back to back; the ratio to mitmdump is taken per round (the machine's drift hits
both alike), and its median and range are reported.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import openai
import orjson

from ssetape.framing.sse import SseParser
from ssetape.simulator.routes import plan

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float = 30) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


@contextmanager
def process(cmd: list[str], port: int) -> Iterator[int]:
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port)
        yield p.pid
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()


def body(events: int, tag: str) -> dict[str, object]:
    return {
        "model": "sim-plain",
        "stream": True,
        "max_tokens": events,
        "messages": [{"role": "user", "content": f"benchmark {tag}"}],
    }


def planned_times(b: dict[str, object], speed: float) -> list[float]:
    """Planned send time of each data event (comments excluded), seconds after the request."""
    p = plan("POST", "/v1/chat/completions", {}, orjson.dumps(b), speed=speed)
    parser, out = SseParser(), []
    for ch in p.chunks:
        out += [ch.at for ev in parser.feed(ch.data) if ev.data is not None]
    return out


def run_httpx(client: httpx.Client, base: str, b: dict[str, object]) -> list[float]:
    t0 = time.perf_counter()
    parser, times = SseParser(), []
    with client.stream("POST", base + "/v1/chat/completions", json=b) as r:
        for chunk in r.iter_raw():
            now = time.perf_counter() - t0
            times += [now for ev in parser.feed(chunk) if ev.data is not None]
    return times


def run_sdk(client: openai.OpenAI, b: dict[str, object]) -> list[float]:
    t0 = time.perf_counter()
    stream = client.chat.completions.create(**b)  # type: ignore[call-overload]
    times = [time.perf_counter() - t0 for _ in stream]
    return [*times, times[-1]]  # the SDK swallows [DONE]; it ends the stream at the same time


TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> tuple[float, float]:
    """CPU time (user + system) of a process, and of its live children (ssetape's recording
    process), in seconds."""

    def own(p: int) -> float:
        with open(f"/proc/{p}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / TICK

    with open(f"/proc/{pid}/task/{pid}/children") as f:
        children = [int(c) for c in f.read().split()]
    return own(pid), sum(own(c) for c in children)


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def latency(base: str, rounds: int, events: int, use_sdk: bool) -> dict[str, float]:
    first, per_event = [], []
    http = httpx.Client(timeout=60)
    sdk = openai.OpenAI(base_url=base + "/v1", api_key="sk-bench", max_retries=0)
    for i in range(rounds + 1):
        b = body(events, f"lat-{i}")
        expected = planned_times(b, 1.0)
        got = run_sdk(sdk, b) if use_sdk else run_httpx(http, base, b)
        if i == 0:
            continue  # warm-up: connection set-up, imports
        lateness = [(g - e) * 1000 for g, e in zip(got, expected, strict=True)]
        first.append(lateness[0])
        per_event += lateness[1:]
    return {
        "first_p50": statistics.median(first),
        "first_p95": pct(first, 0.95),
        "event_p50": statistics.median(per_event),
        "event_p95": pct(per_event, 0.95),
    }


def throughput(base: str, streams: int, events: int) -> float:
    count = [0]
    lock = threading.Lock()

    def one(i: int) -> None:
        with httpx.Client(timeout=120) as c:
            n = len(run_httpx(c, base, body(events, f"tp-{streams}-{i}")))
        with lock:
            count[0] += n

    threads = [threading.Thread(target=one, args=(i,)) for i in range(streams)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return count[0] / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds per target")
    ap.add_argument("--events", type=int, default=40)
    ap.add_argument("--throughput-only", action="store_true", help="skip the latency part")
    ap.add_argument("--long", type=int, default=20_000, help="events in the 1-stream run")
    ap.add_argument("--wide", type=int, default=1_000, help="events per stream, 20 streams")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="ssetape-bench-")
    sim_port, fast_port = free_port(), free_port()
    sim = [str(BIN / "ssetape"), "simulate", "--speed"]

    def mitmdump(up: str, port: int) -> list[str]:
        return [str(BIN / "mitmdump"), "-q", "--mode", f"reverse:{up}", "--listen-host",
                "127.0.0.1", "--listen-port", str(port), "--set", "stream_large_bodies=1",
                "--set", f"confdir={tmp}/conf"]  # fmt: skip

    def ssetape(up: str, port: int) -> list[str]:
        return [str(BIN / "ssetape"), "record", "--mode", f"reverse:{up}", "--port", str(port),
                "--db", f"{tmp}/bench-{port}.db", "--confdir", f"{tmp}/conf"]  # fmt: skip

    # A second, identical mitmdump: how far two equal proxies differ in the same run is the
    # noise any difference between mitmdump and ssetape must be read against.
    names = ["direct", "mitmdump", "ssetape record", "mitmdump again"]
    lat: dict[tuple[str, str], list[dict[str, float]]] = {}
    tput: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {}  # CPU seconds of the proxy and recording processes
    with ExitStack() as stack:
        stack.enter_context(process([*sim, "1", "--port", str(sim_port)], sim_port))
        stack.enter_context(process([*sim, "1000", "--port", str(fast_port)], fast_port))
        bases: dict[tuple[str, str], str] = {}
        pids: dict[tuple[str, str], int] = {}
        for up_port, label in ((sim_port, "latency"), (fast_port, "throughput")):
            up = f"http://127.0.0.1:{up_port}"
            bases[("direct", label)] = up
            for name, cmd in (("mitmdump", mitmdump), ("ssetape record", ssetape),
                              ("mitmdump again", mitmdump)):  # fmt: skip
                port = free_port()
                pids[(name, label)] = stack.enter_context(process(cmd(up, port), port))
                bases[(name, label)] = f"http://127.0.0.1:{port}"
        # Interleaved rounds: the machine's background noise hits every target alike.
        for r in range(args.rounds):
            for name in names:
                for client in () if args.throughput_only else ("httpx", "openai SDK"):
                    res = latency(bases[(name, "latency")], 3, args.events, client != "httpx")
                    lat.setdefault((name, client), []).append(res)
                base = bases[(name, "throughput")]
                throughput(base, 1, 200)  # warm-up
                pid = pids.get((name, "throughput"))
                before = cpu_seconds(pid) if pid else (0.0, 0.0)
                tput[name].append((throughput(base, 1, args.long), throughput(base, 20, args.wide)))
                if pid:
                    time.sleep(1.0)  # the recording process stores the rest
                    after = cpu_seconds(pid)
                    used = cpu.setdefault(name, [0.0, 0.0])
                    for i, (a, b) in enumerate(zip(after, before, strict=True)):
                        used[i] += a - b
                print(f"  {name}: {tput[name][-1][0]:,.0f} / {tput[name][-1][1]:,.0f} events/s",
                      file=sys.stderr)  # fmt: skip
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)

    def med(values: list[float]) -> float:
        return statistics.median(values)

    print(f"\n{args.rounds} interleaved rounds x 3 streams x {args.events} events, simulator "
          "speed 1; lateness against the planned send time, ms (median of rounds)\n")  # fmt: skip
    print("| target | client | first event p50 | first p95 | per event p50 | per event p95 |")
    print("|---|---|---:|---:|---:|---:|")
    for (name, client), rs in lat.items():
        cells = [med([r[k] for r in rs]) for k in ("first_p50", "first_p95", "event_p50",
                                                   "event_p95")]  # fmt: skip
        print(f"| {name} | {client} | " + " | ".join(f"{c:.2f}" for c in cells) + " |")
    print(f"\n{args.rounds} rounds; 1 stream of {args.long:,} events, 20 streams of "
          f"{args.wide:,}; ratio to mitmdump per round: median (range)\n")  # fmt: skip
    print("| target | events/s, 1 stream | events/s, 20 streams | vs mitmdump, 1 stream "
          "| vs mitmdump, 20 streams |")  # fmt: skip
    print("|---|---:|---:|---:|---:|")
    base = tput["mitmdump"]
    for name in names:
        cells = [f"{med([t[k] for t in tput[name]]):,.0f}" for k in (0, 1)]
        for k in (0, 1):
            ratios = [t[k] / b[k] for t, b in zip(tput[name], base, strict=True)]
            cells.append(f"{med(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})")
        print(f"| {name} | " + " | ".join(cells) + " |")
    events = args.rounds * (args.long + 20 * args.wide)
    print("\n| target | proxy process CPU per event | recording process CPU per event |")
    print("|---|---:|---:|")
    for name, (proxy, rec) in cpu.items():
        recording = f"{rec / events * 1e6:.1f} µs" if rec else "-"
        print(f"| {name} | {proxy / events * 1e6:.1f} µs | {recording} |")


if __name__ == "__main__":
    main()
