"""Replay timing while misses pour in: the same timed stream, quiet and under a miss storm.

    python -m bench.bench_miss_storm [--exchanges 10000] [--burst 100] [--rate 200] [--streams 10]
    python -m bench.bench_miss_storm --in-process [--burst 1000] [--streams 5]

A synthetic tape (``bench.tapes``) of ``--exchanges`` recordings; `ssetape replay` in reverse
mode (the direct replay server) serves it. A timed stream (50 events 20 ms apart) is played
``--streams`` times in a row, first alone, then while another process sends requests that
match nothing, ``--burst`` at once, ``--rate`` a second at most (each miss is compared with
the tape for the nearest recording). Reported: each inter-event gap's error against the
recorded offsets (ms), the ratio of the storm's to the quiet run's, the misses answered per
second and their latency.

``--in-process``: as the pytest plugin replays, the replay server runs on a loop thread of
this process, and the storm (``--burst`` misses at once, during each timed stream) and the
timed stream are sent from threads of this same process: all share one interpreter lock.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.bench_record import BIN, free_port, process
from bench.bench_replay import fetch, pct
from bench.tapes import HOST, build_tape, chat_body
from ssetape.replay.direct_front import DirectFront
from ssetape.replay.request_index import RequestIndex
from ssetape.storage.store import Store
from ssetape.testing.loop_thread import LoopThread

EVENTS, GAP_US = 50, 20_000
HOST_URL = f"https://{HOST}"


def gap_errors(times: list[float], offsets: list[int]) -> list[float]:
    """Milliseconds between each gap as received and as recorded."""
    if len(times) != len(offsets):
        raise RuntimeError(f"{len(times)} events received, {len(offsets)} recorded")
    return [
        abs((times[k] - times[k - 1]) - (offsets[k] - offsets[k - 1]) / 1e6) * 1000
        for k in range(1, len(times))
    ]


def timed_errors(port: int, body: bytes, offsets: list[int], streams: int) -> list[float]:
    errors: list[float] = []
    for _ in range(streams):
        _, times, _, _ = asyncio.run(fetch(port, body))
        errors += gap_errors(times, offsets)
    return errors


async def _storm(port: int, burst: int, rate: float, seconds: float) -> None:
    latencies: list[float] = []
    end = time.monotonic() + seconds
    n = 0

    async def one(n: int) -> None:
        t0 = time.perf_counter()
        _, _, body, _ = await fetch(port, chat_body(f"miss {n}", stream=True))
        latencies.append(time.perf_counter() - t0)
        if b"ssetape_replay_miss" not in body:
            raise RuntimeError(f"not a miss: {body[:200]!r}")

    while (began := time.monotonic()) < end:
        await asyncio.gather(*(one(n + i) for i in range(burst)))
        n += burst
        await asyncio.sleep(max(0.0, began + burst / rate - time.monotonic()))
    med, p95 = statistics.median(latencies) * 1000, pct(latencies, 0.95) * 1000
    print(f"{len(latencies) / seconds:.0f} {med:.1f} {p95:.1f}", flush=True)


@contextmanager
def storm(port: int, burst: int, rate: float, seconds: float) -> Iterator[subprocess.Popen[str]]:
    """Another process sends ``burst`` misses at once, again and again, ``rate`` misses a
    second in all (a burst waits for the one before), for ``seconds``; it prints "misses/s,
    median ms, p95 ms" when it is done."""
    cmd = [sys.executable, "-m", "bench.bench_miss_storm", "--storm-port", str(port),
           "--burst", str(burst), "--rate", str(rate), "--storm-seconds", str(seconds)]  # fmt: skip
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parent.parent)
    try:
        time.sleep(1.0)  # the storm is up to speed
        yield p
    finally:
        p.wait(seconds + 60)


def in_process(db: str, body: bytes, offsets: list[int], burst: int, streams: int) -> None:
    """The plugin's case: server, storm and timed stream in one process (see the docstring)."""
    logging.getLogger("ssetape").setLevel(logging.ERROR)  # a warning per miss
    with Store.open(db) as store:
        front = DirectFront(store, RequestIndex(store, store.redactor()), HOST_URL, 1.0)
        front.preload()
        loop = LoopThread.shared()
        port = loop.run(front.http.start("127.0.0.1", 0))
        timed_errors(port, body, offsets, 1)  # warm-up
        quiet = timed_errors(port, body, offsets, streams)
        stormy: list[float] = []
        took: list[float] = []

        async def misses(n: int) -> None:
            t0 = time.perf_counter()
            bodies = (chat_body(f"miss {n} {i}", stream=True) for i in range(burst))
            await asyncio.gather(*(fetch(port, b) for b in bodies))
            took.append(time.perf_counter() - t0)

        for n in range(streams):
            sender = threading.Thread(target=asyncio.run, args=(misses(n),))
            sender.start()
            stormy += timed_errors(port, body, offsets, 1)
            sender.join()
        loop.run(front.http.stop())
    print(f"Python {sys.version.split()[0]}; in one process: replay server, misses, timed stream")
    print(f"quiet:                     {summary(quiet)}")
    print(f"misses, {burst} at once:  {summary(stormy)}")
    print(f"each burst answered in {statistics.median(took):.2f} s (median)")


def summary(errors: list[float]) -> str:
    return (
        f"p50 {statistics.median(errors):5.2f}  p95 {pct(errors, 0.95):5.2f}  "
        f"max {max(errors):6.2f} ms"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--exchanges", type=int, default=10_000)
    ap.add_argument("--burst", type=int, default=100, help="misses sent at once")
    ap.add_argument("--rate", type=float, default=200, help="misses per second, at most")
    ap.add_argument("--streams", type=int, default=10)
    ap.add_argument("--storm-port", type=int)
    ap.add_argument("--storm-seconds", type=float, default=0)
    ap.add_argument("--in-process", action="store_true", help="as the pytest plugin replays")
    args = ap.parse_args()
    if args.storm_port:
        asyncio.run(_storm(args.storm_port, args.burst, args.rate, args.storm_seconds))
        return
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "tape.db")
        body, offsets = build_tape(db, exchanges=args.exchanges, events=EVENTS, gap_us=GAP_US)
        if args.in_process:
            in_process(db, body, offsets, args.burst, args.streams)
            return
        port = free_port()
        cmd = [str(BIN / "ssetape"), "replay", "--db", db, "--port", str(port),
               "--mode", "reverse:https://api.example.test"]  # fmt: skip
        with process(cmd, port):
            timed_errors(port, body, offsets, 1)  # warm-up
            quiet = timed_errors(port, body, offsets, args.streams)
            seconds = args.streams * EVENTS * GAP_US / 1e6 + 3
            with storm(port, args.burst, args.rate, seconds) as p:
                stormy = timed_errors(port, body, offsets, args.streams)
            out = p.stdout.read().split() if p.stdout else []
    shape = f"{args.streams} timed streams of {EVENTS} events, {GAP_US // 1000} ms apart"
    print(f"Python {sys.version.split()[0]}; tape of {args.exchanges} exchanges; {shape}")
    print(f"quiet:                     {summary(quiet)}")
    print(f"misses, {args.burst} at once:   {summary(stormy)}")
    print(f"ratio storm/quiet p95: {pct(stormy, 0.95) / max(pct(quiet, 0.95), 1e-3):.2f}")
    if len(out) == 3:
        print(f"misses answered: {out[0]}/s, latency median {out[1]} ms, p95 {out[2]} ms")


if __name__ == "__main__":
    main()
