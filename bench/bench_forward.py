"""The SDK effect of issue #2, in forward-proxy mode: lateness of a bare httpx POST and of the
official `openai` SDK, direct and through `mitmdump` / `ssetape record` as HTTP proxies.

    python -m bench.bench_forward [--rounds 6]

The issue saw SDK POSTs pay a constant 25-45 ms on every event through mitmdump (Nagle /
delayed ACK suspected). bench_record measures reverse mode; this runs the same streams with
the proxy set on the client (as HTTP_PROXY does), to both `127.0.0.1` and `localhost` (which
may resolve to IPv6 first), on one keep-alive client per target, as an application would.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack

import httpx
import openai

from bench.bench_record import BIN, body, free_port, planned_times, process, run_httpx, run_sdk


def lateness(run: Callable[[dict[str, object]], list[float]], rounds: int) -> tuple[float, float]:
    """Median lateness (ms) of the first event and of the others, after one warm-up."""
    first, rest = [], []
    for i in range(rounds + 1):
        b = body(40, f"forward-{i}-{time.time()}")
        late = [(g - e) * 1000 for g, e in zip(run(b), planned_times(b, 1.0), strict=True)]
        if i:
            first.append(late[0])
            rest += late[1:]
    return statistics.median(first), statistics.median(rest)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="ssetape-bench-fwd-")
    sim, md, st = free_port(), free_port(), free_port()
    print("| upstream host | target | httpx first | httpx per event | SDK first | SDK per event |")
    print("|---|---|---:|---:|---:|---:|")
    with ExitStack() as stack:
        stack.enter_context(process([str(BIN / "ssetape"), "simulate", "--port", str(sim)], sim))
        stack.enter_context(process([str(BIN / "mitmdump"), "-q", "--listen-host", "127.0.0.1",
                                     "--listen-port", str(md), "--set", "stream_large_bodies=1",
                                     "--set", f"confdir={tmp}/conf"], md))  # fmt: skip
        record = [str(BIN / "ssetape"), "record", "--port", str(st), "--db", f"{tmp}/fwd.db",
                  "--confdir", f"{tmp}/conf"]  # fmt: skip
        stack.enter_context(process(record, st))
        targets = {"direct": None, "mitmdump": f"http://127.0.0.1:{md}",
                   "ssetape record": f"http://127.0.0.1:{st}"}  # fmt: skip
        for host in ("127.0.0.1", "localhost"):
            up = f"http://{host}:{sim}"
            for name, proxy in targets.items():
                plain = stack.enter_context(httpx.Client(proxy=proxy, timeout=60))
                http = openai.DefaultHttpxClient(proxy=proxy, timeout=60)
                sdk = openai.OpenAI(base_url=up + "/v1", api_key="sk-bench", max_retries=0,
                                    http_client=http)  # fmt: skip
                h = lateness(lambda b, c=plain, u=up: run_httpx(c, u, b), args.rounds)
                s = lateness(lambda b, c=sdk: run_sdk(c, b), args.rounds)
                print(f"| {host} | {name} | {h[0]:.2f} | {h[1]:.2f} | {s[0]:.2f} | {s[1]:.2f} |")


if __name__ == "__main__":
    main()
