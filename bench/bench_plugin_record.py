"""A suite of tests that each record one stream through the pytest plugin, beside the same
suite with no proxy at all.

    python -m bench.bench_plugin_record [--tests 20] [--rounds 3] [--speed 1] [-n 2]

The upstream is ssetape's simulator (``--speed 1``: the streams take the time a real API's
take; higher is faster). Each test streams one chat completion with the official openai SDK:

- "no proxy": the SDK's ``base_url`` is the simulator itself;
- "record": ``base_url=ssetape.base_url(upstream)`` with ``--ssetape-record-mode=all``, so
  every round records every test and writes its cassette;
- "replay": the same cassettes replayed (``--ssetape-record-mode=none``, recorded timing).

Each is a whole ``pytest`` run (startup included), the rounds interleaved. Printed: the
median wall time of each and record / no proxy as a ratio (issue 25's goal: under 2x).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ssetape.simulator.simulator import Simulator

CONFTEST = """
import os, pytest

@pytest.fixture
def base(request):
    upstream = os.environ["BENCH_UPSTREAM"] + "/v1"
    if os.environ["BENCH_WAY"] == "no proxy":
        return upstream
    return request.getfixturevalue("ssetape").base_url(upstream)
"""

TEST = """
def test_{n}(base):
    import openai
    client = openai.OpenAI(base_url=base, api_key="sk-bench", max_retries=0)
    chunks = list(client.chat.completions.create(
        model="sim-chat", stream=True,
        messages=[{{"role": "user", "content": "test number {n}"}}]))
    assert chunks
"""

WAYS = {
    "no proxy": [],
    "record": ["--ssetape-record-mode=all"],
    "replay": ["--ssetape-record-mode=none", "--ssetape-speed=1"],
}


def run(project: Path, way: str, upstream: str, confdir: Path, workers: int) -> float:
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
           "--ssetape-confdir", str(confdir), *WAYS[way]]  # fmt: skip
    if workers:
        cmd += ["-n", str(workers)]
    env = {**os.environ, "BENCH_UPSTREAM": upstream, "BENCH_WAY": way}
    t0 = time.perf_counter()
    out = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=900)
    took = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"{way}: pytest failed\n{out.stdout[-3000:]}{out.stderr[-2000:]}")
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tests", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--speed", type=float, default=1.0, help="the simulator's speed")
    ap.add_argument("-n", "--workers", type=int, default=0, help="pytest-xdist workers")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-plugin-") as tmp:
        project, confdir = Path(tmp) / "project", Path(tmp) / "confdir"
        project.mkdir()
        (project / "conftest.py").write_text(CONFTEST)
        (project / "test_suite.py").write_text("".join(TEST.format(n=n) for n in range(args.tests)))
        times: dict[str, list[float]] = {way: [] for way in WAYS}
        with Simulator(speed=args.speed).serve_in_thread() as sim:
            for _ in range(args.rounds):
                for way in WAYS:
                    times[way].append(run(project, way, sim.url, confdir, args.workers))
    med = {way: statistics.median(t) for way, t in times.items()}
    print(f"{args.tests} tests, each streaming one chat completion (simulator speed "
          f"{args.speed:g}), {args.rounds} rounds, {args.workers or 'no'} xdist workers; "
          "median wall time of the whole pytest run:")  # fmt: skip
    for way, t in times.items():
        spread = ", ".join(f"{x:.2f}" for x in t)
        print(f"  {way:9} {med[way]:6.2f} s   ({spread})")
    print(f"  record / no proxy: {med['record'] / med['no proxy']:.2f}x"
          f"   replay / no proxy: {med['replay'] / med['no proxy']:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
