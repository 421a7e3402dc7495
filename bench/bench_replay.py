"""Replay timing fidelity: `ssetape replay` vs mitmproxy's server replay, in one run.

    python bench/bench_replay.py [--events 40] [--concurrency 1,20,200]

Targets: `ssetape replay` in reverse mode (record mode none: the direct replay server, no
proxy in the data path), the same through mitmproxy (record mode new_episodes keeps the
replayer addon and its timed server), and mitmproxy's own server replay.

Records 20 distinct chat streams (40 events, ~20 ms apart, with jitter) from the simulator
through `ssetape record` (and the same through `mitmdump -w` for mitmproxy's server replay),
stops the simulator, then replays them with N concurrent clients (request i uses recording
i % 20). Errors against the recorded offsets, measured at the client: time to first byte,
and each inter-event gap. The client is a minimal asyncio HTTP/1.1 client so that the
measurement itself costs little CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import orjson

from bench.bench_record import BIN, free_port, process
from ssetape.sse import SseParser
from ssetape.storage.store import Store

RECORDINGS = 20


def body(i: int, events: int) -> bytes:
    return orjson.dumps({
        "model": "sim-plain", "stream": True, "max_tokens": events,
        "messages": [{"role": "user", "content": f"replay bench {i}"}],
    })  # fmt: skip


async def fetch(port: int, payload: bytes) -> tuple[float, list[float], bytes]:
    """(time to first byte, arrival time of each SSE block, body), from request sent."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(payload), payload)
    )
    await writer.drain()
    t0 = time.perf_counter()
    head = await reader.readuntil(b"\r\n\r\n")
    ttfb = time.perf_counter() - t0
    chunked = b"chunked" in head.lower()
    parser, times, buf, out = SseParser(), [], b"", b""
    while True:
        data = await reader.read(65536)
        now = time.perf_counter() - t0
        if not data:
            break
        if not chunked:
            body_part = data
        else:
            buf += data
            body_part = b""
            while True:  # minimal de-chunking
                line_end = buf.find(b"\r\n")
                if line_end < 0:
                    break
                size = int(buf[:line_end].split(b";")[0], 16)
                if size == 0:
                    buf = b""
                    break
                if len(buf) < line_end + 2 + size + 2:
                    break
                body_part += buf[line_end + 2 : line_end + 2 + size]
                buf = buf[line_end + 2 + size + 2 :]
        out += body_part
        times += [now] * len(parser.feed(body_part))
    writer.close()
    return ttfb, times, out


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


async def run_round(port: int, n: int, events: int, offsets: list[list[float]],
                    ttfbs: list[float]) -> dict[str, float]:  # fmt: skip
    results = await asyncio.gather(*(fetch(port, body(i % RECORDINGS, events)) for i in range(n)))
    ttfb_err, gap_err = [], []
    for i, (ttfb, times, _) in enumerate(results):
        rec = offsets[i % RECORDINGS]
        ttfb_err.append(abs(ttfb - ttfbs[i % RECORDINGS]) * 1000)
        if len(times) != len(rec):
            raise RuntimeError(f"stream {i}: {len(times)} events, recorded {len(rec)}")
        for k in range(1, len(times)):
            gap_err.append(abs((times[k] - times[k - 1]) - (rec[k] - rec[k - 1])) * 1000)
    return {
        "ttfb_p50": statistics.median(ttfb_err), "ttfb_p95": pct(ttfb_err, 0.95),
        "gap_p50": statistics.median(gap_err), "gap_p95": pct(gap_err, 0.95),
        "gap_max": max(gap_err), "events": len(gap_err) + n,
    }  # fmt: skip


async def record_all(port: int, events: int) -> None:
    await asyncio.gather(*(fetch(port, body(i, events)) for i in range(RECORDINGS)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=40)
    ap.add_argument("--concurrency", default="1,20,200")
    args = ap.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="ssetape-bench-"))
    db, flows, conf = tmp / "tape.db", tmp / "flows.mitm", tmp / "conf"
    sim_port = free_port()
    with process([str(BIN / "ssetape"), "simulate", "--port", str(sim_port)], sim_port):
        up = f"http://127.0.0.1:{sim_port}"
        p = free_port()
        with process([str(BIN / "ssetape"), "record", "--db", str(db), "--port", str(p),
                      "--mode", f"reverse:{up}", "--confdir", str(conf)], p):  # fmt: skip
            asyncio.run(record_all(p, args.events))
        p = free_port()
        with process([str(BIN / "mitmdump"), "-q", "--mode", f"reverse:{up}", "--listen-port",
                      str(p), "-w", str(flows), "--set", f"confdir={conf}"], p):  # fmt: skip
            asyncio.run(record_all(p, args.events))
    store = Store.open(str(db), create=False)
    rows = sorted(store.exchanges(), key=lambda x: x.id)
    by_prompt = {}
    for x in rows:
        prompt = orjson.loads(x.request_body or b"{}")["messages"][0]["content"]
        by_prompt[int(prompt.rsplit(" ", 1)[1])] = x
    offsets = [[e.offset_us / 1e6 for e in store.events(by_prompt[i].id)]
               for i in range(RECORDINGS)]  # fmt: skip
    ttfbs = [(by_prompt[i].ttfb_us or 0) / 1e6 for i in range(RECORDINGS)]
    store.close()

    table: list[tuple[str, int, dict[str, float]]] = []
    targets = {
        "ssetape replay": lambda port: [str(BIN / "ssetape"), "replay", "--db", str(db),
                                        "--port", str(port), "--mode", f"reverse:{up}",
                                        "--confdir", str(conf)],
        # new_episodes may forward, so this one keeps mitmproxy in the data path.
        "ssetape replay, via mitmproxy": lambda port: [
            str(BIN / "ssetape"), "replay", "--db", str(db), "--port", str(port), "--mode",
            f"reverse:{up}", "--confdir", str(conf), "--record-mode", "new_episodes"],
        "mitmdump --server-replay": lambda port: [
            str(BIN / "mitmdump"), "-q", "--mode", f"reverse:{up}", "--listen-port", str(port),
            "--server-replay", str(flows), "--set", "server_replay_reuse=true",
            "--set", "server_replay_extra=kill", "--set", "connection_strategy=lazy",
            "--set", f"confdir={conf}"],
    }  # fmt: skip
    for name, cmd in targets.items():
        port = free_port()
        with process(cmd(port), port):
            time.sleep(0.5)
            asyncio.run(run_round(port, 1, args.events, offsets, ttfbs))  # warm-up
            for n in levels:
                table.append((name, n, asyncio.run(run_round(port, n, args.events, offsets,
                                                             ttfbs))))  # fmt: skip
                print(f"done: {name} x{n}", file=sys.stderr)

    print(f"\n{RECORDINGS} recordings x {args.events} events (~20 ms gaps); absolute error "
          "against the recorded timing, ms\n")  # fmt: skip
    print("| replayer | streams | TTFB err p50 | TTFB err p95 | gap err p50 | gap err p95 "
          "| gap err max |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, n, r in table:
        print(f"| {name} | {n} | {r['ttfb_p50']:.2f} | {r['ttfb_p95']:.2f} | {r['gap_p50']:.2f} "
              f"| {r['gap_p95']:.2f} | {r['gap_max']:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
