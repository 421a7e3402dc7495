"""Read paths on long recordings: `show`, HAR and cassette export, replay at speed 0, replay's
start.

    python -m bench.bench_read_paths [--events 2000000] [--replay-events 200000]

Stores are written straight (``bench.tapes.build_stream``): one stream of ``--events`` tiny
events (10 µs apart), one of 200,000 response headers, one of ``--replay-events`` events, and
five recordings of 60 MiB each. Each command runs as a process of its own; reported: its wall
time, the time to its first screen (the first 50 lines of output) and its peak resident memory
(``wait4``), and for replay the time to the first byte and to the whole body at speed 0, and
the replay process's resident memory once it listens (after its preload).
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.bench_record import BIN, free_port, wait_port
from bench.tapes import build_stream, chat_body

SCREEN = 50  # lines: a terminal's first screen


def run(cmd: list[str]) -> tuple[float, float, float]:
    """(seconds to the first screen of output, seconds in all, peak RSS MiB) of ``cmd``."""
    t0 = time.perf_counter()
    # GNU time's %M: the peak of the command alone (a child forked from this process would
    # count this process's own peak too).
    p = subprocess.Popen(["/usr/bin/time", "-f", "%M", *cmd], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)  # fmt: skip
    assert p.stdout is not None
    first, lines = None, 0
    while chunk := p.stdout.read1(65536):
        lines += chunk.count(b"\n")
        if first is None and lines >= SCREEN:
            first = time.perf_counter() - t0
    p.wait()
    took = time.perf_counter() - t0
    assert p.stderr is not None
    err = p.stderr.read().decode().split()
    if p.returncode:
        raise RuntimeError(f"{cmd} exited {p.returncode}: {' '.join(err)[-300:]}")
    return first if first is not None else took, took, int(err[-1]) / 1024


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def fetch_timed(port: int, body: bytes) -> tuple[float, float, int]:
    """(seconds to the first response byte, to the last, body bytes) of one request."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: bench\r\ncontent-type: "
            b"application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s"
            % (len(body), body)
        )
        t0 = time.perf_counter()
        first = None
        n = 0
        while data := s.recv(1 << 20):
            first = first if first is not None else time.perf_counter() - t0
            n += len(data)
        return first or 0.0, time.perf_counter() - t0, n


def replay(db: str, body: bytes, rounds: int) -> tuple[float, list[tuple[float, float, int]]]:
    """RSS of `ssetape replay --speed 0` once it listens, and ``rounds`` timed fetches."""
    port = free_port()
    cmd = [str(BIN / "ssetape"), "replay", "--db", db, "--port", str(port), "--speed", "0",
           "--mode", "reverse:https://api.example.test"]  # fmt: skip
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, 120)
        rss = rss_mib(p.pid)
        return rss, [fetch_timed(port, body) for _ in range(rounds)]
    finally:
        p.terminate()
        p.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--replay-events", type=int, default=200_000)
    ap.add_argument("--full-json", action="store_true", help="also `show --full --json`")
    args = ap.parse_args()
    ssetape = str(BIN / "ssetape")
    print(f"Python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory() as tmp:
        long_db, head_db = f"{tmp}/long.db", f"{tmp}/headers.db"
        build_stream(long_db, events=args.events)
        build_stream(head_db, events=10, headers=200_000)
        shows = [
            (f"show of {args.events:,} events", [ssetape, "show", "1", "--db", long_db]),
            ("  --json", [ssetape, "show", "1", "--json", "--db", long_db]),
            ("  --timeline", [ssetape, "show", "1", "--timeline", "--db", long_db]),
            ("  HAR export", [ssetape, "export", "-o", "-", "--format", "har", "--db", long_db]),
            ("  cassette export", [ssetape, "export", "-o", "-", "--db", long_db]),
            ("show of 200,000 headers", [ssetape, "show", "1", "--db", head_db]),
        ]
        if args.full_json:
            shows.insert(3, ("  --full --json", [ssetape, "show", "1", "--full", "--json",
                                                 "--db", long_db]))  # fmt: skip
        for name, cmd in shows:
            first, took, rss = run(cmd)
            print(f"{name:28} first screen {first:6.2f} s, all {took:6.2f} s, peak {rss:5.0f} MiB")

        replay_db = f"{tmp}/replay.db"
        build_stream(replay_db, events=args.replay_events)
        rss, fetches = replay(replay_db, chat_body("long", stream=True), 3)
        print(f"replay of one {args.replay_events:,}-event recording: {rss:.0f} MiB resident "
              "once listening")  # fmt: skip
        for ttfb, took, n in fetches:
            print(
                f"replay --speed 0 of {args.replay_events:,} events: first byte "
                f"{ttfb * 1000:6.1f} ms, all {n:,} bytes in {took:5.2f} s"
            )
        big_db = f"{tmp}/big.db"
        for i in range(5):  # 60 MiB each: 60,000 events of about 1 KiB
            build_stream(big_db, events=60_000, text=f"big {i}", pad=1024)
        rss, fetches = replay(big_db, chat_body("big 0", stream=True), 1)
        print(f"replay of five 60 MiB recordings: {rss:.0f} MiB resident once listening")
        ttfb, took, n = fetches[0]
        print(
            f"  one of them at speed 0: first byte {ttfb * 1000:.1f} ms, "
            f"{n:,} bytes in {took:.2f} s"
        )


if __name__ == "__main__":
    main()
