"""Peak memory and time of `ssetape import` on cassettes an attacker (or a long stream) makes.

    python -m bench.bench_import [--events 2000000] [--fields 10000] [--body-mb 60]

Each cassette is written to a temporary folder and imported by a real `ssetape import` into a
fresh SQLite store; its peak resident memory (ru_maxrss of the child) and wall time are
printed beside the cassette's size and its longest line:

- one exchange of ``--events`` small SSE events (each its own line);
- a header line with ``--fields`` `redact_fields` (the bound; one more is refused);
- one exchange line with a ``--body-mb`` MB response body (the line limit is 64 MiB).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import orjson

BIN = Path(sys.executable).parent
EXCHANGE = {
    "kind": "exchange", "method": "POST", "scheme": "http", "host": "h", "port": 80,
    "path": "/", "query": "", "http_version": "HTTP/1.1", "request_headers": [],
    "fingerprint": "f", "status": 200, "is_stream": True, "state": "completed",
    "response_headers": [["content-type", "text/event-stream"]],
}  # fmt: skip
HEADER = b'{"ssetape_cassette": 2}\n'


def events(n: int) -> Callable[[IO[bytes]], None]:
    def write(f: IO[bytes]) -> None:
        f.write(HEADER + orjson.dumps(EXCHANGE) + b"\n")
        for i in range(n):
            f.write(
                b'{"kind":"event","seq":%d,"offset_us":%d,"raw":"data: {\\"i\\": %d}\\n\\n"}\n'
                % (i, i, i)
            )

    return write


def fields(n: int) -> Callable[[IO[bytes]], None]:
    def write(f: IO[bytes]) -> None:
        names = [f"f{i:07d}" for i in range(n)]
        f.write(orjson.dumps({"ssetape_cassette": 2, "redact_fields": names}) + b"\n")
        f.write(orjson.dumps(EXCHANGE) + b"\n")

    return write


def body(mb: int) -> Callable[[IO[bytes]], None]:
    def write(f: IO[bytes]) -> None:
        text = '{"a": "' + "x" * (mb * 1_000_000) + '"}'
        x = {**EXCHANGE, "is_stream": False, "response_body": text}
        x["response_headers"] = [["content-type", "application/json"]]
        f.write(HEADER + orjson.dumps(x) + b"\n")

    return write


def measure(tmp: Path, name: str, make: Callable[[IO[bytes]], None]) -> None:
    tape, db = tmp / f"{name}.jsonl", tmp / f"{name}.db"
    with tape.open("wb") as f:
        make(f)
    longest = max(len(line) for line in tape.open("rb"))
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    r = subprocess.run(
        [str(BIN / "ssetape"), "import", str(tape), "--db", str(db)],
        capture_output=True,
        text=True,
    )
    took = time.perf_counter() - t0
    # ru_maxrss of children is the largest of any child so far: each run must beat the last
    # to show, so runs go from the smallest expected peak up, and a lower one reads as "<=".
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    shown = f"{peak / 1024:.0f} MiB" if peak > before else f"<= {before / 1024:.0f} MiB"
    outcome = "ok" if r.returncode == 0 else r.stderr.strip().splitlines()[-1][:60]
    print(
        f"| {name} | {tape.stat().st_size / 1e6:.1f} MB | {longest / 1e6:.2f} MB | {shown} "
        f"| {took:.1f} s | {outcome} |",
        flush=True,
    )
    os.remove(tape)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.bench_import")
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--fields", type=int, default=10_000)
    ap.add_argument("--body-mb", type=int, default=60)
    args = ap.parse_args()
    print("| cassette | size | longest line | peak RSS | time | result |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="bench-import-") as tmp:
        measure(Path(tmp), f"{args.fields} redact_fields", fields(args.fields))
        measure(Path(tmp), f"{args.events} events", events(args.events))
        measure(Path(tmp), f"{args.body_mb} MB body", body(args.body_mb))


if __name__ == "__main__":
    main()
