"""Replay timing fidelity: `ssetape replay` in each mode vs mitmproxy's server replay, in one run.

    python -m bench.bench_replay [--events 40] [--concurrency 1,20,200] [--only NAME,...]
                                 [--bursts K] [--warm]

Targets: `ssetape replay` in reverse mode (record mode none: the direct replay server, no
proxy in the data path), in forward mode over plain HTTP (absolute-form requests) and over
HTTPS (CONNECT, TLS with the CA of `ssetape ca`: the same direct server ends the tunnel), the
same with two processes on the port (`--workers 2`), the same in record mode new_episodes
(the same server; each burst of N also carries max(1, N // 20) requests not on the tape, which
it relays to its recording proxy and records while the hits play: they are not measured, and
each new_episodes target starts from its own copy of the tape; over HTTPS they reach a second
simulator that serves HTTPS, `bench/tls_upstream.py`, whose certificate the recording proxy
trusts), the same through mitmproxy (a `--set` keeps the replayer addon and its timed server),
and mitmproxy's own server replay.

Records 20 distinct chat streams (40 events, ~20 ms apart, with jitter) from the simulator
through `ssetape record` (and the same through `mitmdump -w` for mitmproxy's server replay),
then replays them with N concurrent clients (request i uses recording
i % 20). Errors against the recorded offsets, measured at the client from the moment the
request was sent (after any tunnel and handshake): time to first byte, and each inter-event
gap. Every chosen target listens for the whole run; at each level the targets take turns,
K bursts each (``--bursts``), and each row pools the errors of its K bursts. Then `--speed
0`: each recording alone, the time until its last byte (goal: < 50 ms).
The client is a minimal asyncio HTTP/1.1 client so that the measurement itself costs little.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import shutil
import ssl
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson

from bench.bench_record import BIN, free_port, process
from ssetape.framing.sse import SseParser
from ssetape.simulator.routes import plan
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store

RECORDINGS = 20
SINGLE = 10  # one-stream rounds, one after another


async def wake_lateness(rounds: int = 40) -> tuple[float, float]:
    """How late this machine's event loop wakes for a timer when idle (p50, p95 in ms): the
    floor under every error below, on the client's side and on the replayer's."""
    loop = asyncio.get_running_loop()
    late = []
    for _ in range(rounds):
        when = loop.time() + 0.02
        await asyncio.sleep(0.02)
        late.append((loop.time() - when) * 1000)
    return statistics.median(late), pct(late, 0.95)


def body(i: int, events: int) -> bytes:
    return orjson.dumps({
        "model": "sim-plain", "stream": True, "max_tokens": events,
        "messages": [{"role": "user", "content": f"replay bench {i}"}],
    })  # fmt: skip


@dataclass(frozen=True)
class Way:
    """How the client reaches the replayer: ``origin`` is the recorded upstream's
    host:port, which forward-mode requests name; ``tls`` (forward only) tunnels with CONNECT."""

    forward: bool = False
    tls: ssl.SSLContext | None = None
    origin: str = ""


REVERSE = Way()


Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def connect(port: int, way: Way = REVERSE) -> Conn:
    """A connection to the replayer (through its tunnel and TLS handshake, for HTTPS)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    if way.tls is not None:
        writer.write(b"CONNECT %s HTTP/1.1\r\nhost: %s\r\n\r\n" % ((way.origin.encode(),) * 2))
        await reader.readuntil(b"\r\n\r\n")
        await writer.start_tls(way.tls, server_hostname=way.origin.split(":")[0])
    return reader, writer


async def fetch(
    port: int, payload: bytes, way: Way = REVERSE, conn: Conn | None = None
) -> tuple[float, list[float], bytes, float]:
    """(time to first byte, arrival time of each SSE block, body), from request sent, and how
    long the connection took to set up (tunnel and handshake; 0 on ``conn``); on ``conn`` if
    given (connected beforehand), else on a new connection."""
    c0 = time.perf_counter()
    reader, writer = conn or await connect(port, way)
    setup = 0.0 if conn else time.perf_counter() - c0
    target = b"/v1/chat/completions"
    if way.forward and way.tls is None:
        target = b"http://" + way.origin.encode() + target
    writer.write(
        b"POST %s HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (target, len(payload), payload)
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
    return ttfb, times, out, setup


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


MISSED = iter(range(1 << 30))  # each miss a prompt never asked before


Errors = tuple[list[float], list[float], list[float]]  # TTFB, gaps, set-up (ms)


@contextlib.contextmanager
def quiet_gc() -> Iterator[None]:
    """No collection in the measuring client during a burst: a full one of this process (it
    holds the tape's rows) stalled its loop for ~100 ms, which the table would have charged
    to the replayer."""
    gc.collect()  # the last burst's garbage, before the clock runs
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


async def burst(port: int, r: int, n: int, events: int, way: Way, warm: bool,
                misses: int) -> list[tuple[float, list[float], bytes, float]]:  # fmt: skip
    """One burst of ``n`` streams (stream j of them all plays recording j % 20), and
    ``misses`` requests not on the tape."""
    conns: list[Conn | None] = [None] * n
    if warm:
        conns = list(await asyncio.gather(*(connect(port, way) for _ in range(n))))
    extra = [fetch(port, body(RECORDINGS + next(MISSED), events), way)
             for _ in range(misses)]  # fmt: skip
    got = await asyncio.gather(
        *(fetch(port, body((r * n + i) % RECORDINGS, events), way, conns[i]) for i in range(n)),
        *extra,
    )
    return got[:n]


async def run_round(port: int, n: int, events: int, offsets: list[list[float]],
                    ttfbs: list[float], way: Way, warm: bool = False,
                    misses: int = 0) -> Errors:  # fmt: skip
    """N streams at once; ``warm``: every connection (and tunnel, and handshake) is made
    first and the N requests then go out together, as from clients that keep connections.
    One stream is played ``SINGLE`` times, one after another (one sample says little).
    ``misses``: requests not on the tape sent in the same burst (recorded by new_episodes;
    not measured: they have no recorded timing yet)."""
    results = []
    with quiet_gc():
        for r in range(SINGLE if n == 1 else 1):
            results += await burst(port, r, n, events, way, warm, misses)
    n = len(results)
    ttfb_err, gap_err, setups = [], [], []
    for i, (ttfb, times, _, setup) in enumerate(results):
        setups.append(setup * 1000)
        rec = offsets[i % RECORDINGS]
        ttfb_err.append(abs(ttfb - ttfbs[i % RECORDINGS]) * 1000)
        if len(times) != len(rec):
            raise RuntimeError(f"stream {i}: {len(times)} events, recorded {len(rec)}")
        for k in range(1, len(times)):
            gap_err.append(abs((times[k] - times[k - 1]) - (rec[k] - rec[k - 1])) * 1000)
    return ttfb_err, gap_err, setups


def summary(errors: Errors) -> dict[str, float]:
    ttfb_err, gap_err, setups = errors
    return {
        "ttfb_p50": statistics.median(ttfb_err), "ttfb_p95": pct(ttfb_err, 0.95),
        "gap_p50": statistics.median(gap_err), "gap_p95": pct(gap_err, 0.95),
        "gap_max": max(gap_err), "setup_p95": pct(setups, 0.95),
    }  # fmt: skip


async def at_once(port: int, events: int, way: Way) -> float:
    """Speed 0: the longest any recording takes to arrive whole (ms from the request sent),
    one at a time."""
    worst = 0.0
    for i in range(RECORDINGS):
        ttfb, times, _, _ = await fetch(port, body(i, events), way)
        worst = max(worst, ttfb, *times)
    return worst * 1000


def states(tape: Path, before: int) -> dict[str, int]:
    """How many exchanges a new_episodes target stored, by state (the tape held ``before``)."""
    with Store.open(str(tape), create=False) as store:
        rows = sorted(Queries(store).exchanges(), key=lambda x: x.id)[before:]
    out: dict[str, int] = {}
    for x in rows:
        out[x.state] = out.get(x.state, 0) + 1
    return out


def recorded_gaps(tape: Path, before: int) -> list[float]:
    """How faithfully a new_episodes target recorded its misses while the hits played: each
    stored gap against the one the simulator planned for that request (ms). The recording
    becomes the tape, so a recording side starved of CPU in a burst would show here."""
    errors: list[float] = []
    with Store.open(str(tape), create=False) as store:
        q = Queries(store)
        for x in sorted(q.exchanges(), key=lambda x: x.id)[before:]:
            if x.state != "completed" or x.request_body is None:
                continue
            planned = plan("POST", "/v1/chat/completions", {}, x.request_body).chunks
            stored = [e.offset_us / 1e6 for e in q.events(x.id)]
            if len(stored) != len(planned):
                raise RuntimeError(f"exchange {x.id}: {len(stored)} events, planned {len(planned)}")
            for k in range(1, len(stored)):
                want = planned[k].at - planned[k - 1].at
                errors.append(abs((stored[k] - stored[k - 1]) - want) * 1000)
    return errors


async def record_all(port: int, events: int) -> None:
    await asyncio.gather(*(fetch(port, body(i, events)) for i in range(RECORDINGS)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=40)
    ap.add_argument("--concurrency", default="1,20,200")
    ap.add_argument("--only", default="", help="targets to run (comma-separated names)")
    ap.add_argument(
        "--bursts",
        type=int,
        default=1,
        help="bursts of each level above 1 per target, taking turns with the other targets; "
        "the errors of all of them are pooled",
    )
    ap.add_argument(
        "--warm",
        action="store_true",
        help="connect (tunnel, handshake) every client before the burst of requests",
    )
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ssetape-bench-"))
    db, flows, conf = tmp / "tape.db", tmp / "flows.mitm", tmp / "conf"
    sim_port, tls_port = free_port(), free_port()
    # The simulators stay up: new_episodes records the misses of each burst from them (over
    # HTTPS from the second, whose certificate the recording proxy is told to trust).
    with contextlib.ExitStack() as stack:
        stack.enter_context(process([str(BIN / "ssetape"), "simulate", "--port", str(sim_port)],
                                    sim_port))  # fmt: skip
        stack.enter_context(process([sys.executable, "-m", "bench.tls_upstream", "--port",
                                     str(tls_port), "--cert", str(tmp / "upstream.pem")],
                                    tls_port))  # fmt: skip
        up = f"http://127.0.0.1:{sim_port}"
        p = free_port()
        with process([str(BIN / "ssetape"), "record", "--db", str(db), "--port", str(p),
                      "--mode", f"reverse:{up}", "--confdir", str(conf)], p):  # fmt: skip
            asyncio.run(record_all(p, args.events))
        p = free_port()
        with process([str(BIN / "mitmdump"), "-q", "--mode", f"reverse:{up}", "--listen-port",
                      str(p), "-w", str(flows), "--set", f"confdir={conf}"], p):  # fmt: skip
            asyncio.run(record_all(p, args.events))
        replay_all(args, up, (sim_port, tls_port), db, flows, conf)


def replay_all(args: argparse.Namespace, up: str, ports: tuple[int, int], db: Path, flows: Path,
               conf: Path) -> None:  # fmt: skip
    levels = [int(c) for c in args.concurrency.split(",")]
    store = Store.open(str(db), create=False)
    queries = Queries(store)
    rows = sorted(queries.exchanges(), key=lambda x: x.id)
    by_prompt = {}
    for x in rows:
        prompt = orjson.loads(x.request_body or b"{}")["messages"][0]["content"]
        by_prompt[int(prompt.rsplit(" ", 1)[1])] = x
    offsets = [[e.offset_us / 1e6 for e in queries.events(by_prompt[i].id)]
               for i in range(RECORDINGS)]  # fmt: skip
    ttfbs = [(by_prompt[i].ttfb_us or 0) / 1e6 for i in range(RECORDINGS)]
    store.close()

    table: list[tuple[str, int, dict[str, float]]] = []
    tls = ssl.create_default_context(cafile=conf / "mitmproxy-ca-cert.pem")
    # Matching compares hosts, not ports: HTTPS requests name the HTTPS simulator, where
    # new_episodes forwards their misses.
    forward = Way(forward=True, origin=f"127.0.0.1:{ports[0]}")
    reverse, https = REVERSE, Way(True, tls, f"127.0.0.1:{ports[1]}")

    def ssetape(port: int, mode: str, *more: str) -> list[str]:  # a later --db wins
        return [str(BIN / "ssetape"), "replay", "--db", str(db), "--port", str(port),
                "--mode", mode, "--confdir", str(conf), *more]  # fmt: skip

    # (command, how the client reaches it). new_episodes: the same server, a miss relayed to
    # the recording proxy (a burst of N carries N // 20 misses, at least one); a `--set` keeps
    # mitmproxy (and the replayer addon) in the data path.
    episodes = ("--record-mode", "new_episodes")
    trust = ("--set", f"ssl_verify_upstream_trusted_ca={db.with_name('upstream.pem')}")
    targets = {
        # Each new_episodes row right after record mode none's, so that the two are measured
        # minutes apart at most (a shared machine's load drifts).
        "ssetape replay (reverse)": (lambda p, *a: ssetape(p, f"reverse:{up}", *a), reverse),
        "ssetape replay new_episodes (reverse)": (lambda p, *a: ssetape(
            p, f"reverse:{up}", *episodes, *a), reverse),
        "ssetape replay (forward HTTP)": (lambda p, *a: ssetape(p, "regular", *a), forward),
        "ssetape replay new_episodes (forward HTTP)": (lambda p, *a: ssetape(
            p, "regular", *episodes, *a), forward),
        "ssetape replay (forward HTTPS)": (lambda p, *a: ssetape(p, "regular", *a), https),
        "ssetape replay new_episodes (forward HTTPS)": (lambda p, *a: ssetape(
            p, "regular", *episodes, *trust, *a), https),
        "ssetape replay --workers 2 (reverse)": (
            lambda p, *a: ssetape(p, f"reverse:{up}", "--workers", "2", *a), reverse),
        "ssetape replay --workers 2 (forward HTTP)": (
            lambda p, *a: ssetape(p, "regular", "--workers", "2", *a), forward),
        "ssetape replay --workers 2 (forward HTTPS)": (
            lambda p, *a: ssetape(p, "regular", "--workers", "2", *a), https),
        "ssetape replay via mitmproxy, --set (reverse)": (lambda p, *a: ssetape(
            p, f"reverse:{up}", "--set", "connection_strategy=lazy", *a), reverse),
        "ssetape replay via mitmproxy, --set (forward HTTPS)": (lambda p, *a: ssetape(
            p, "regular", "--set", "connection_strategy=lazy", *a), https),
        "mitmdump --server-replay (reverse)": (lambda p, *a: [
            str(BIN / "mitmdump"), "-q", "--mode", f"reverse:{up}", "--listen-port", str(p),
            "--server-replay", str(flows), "--set", "server_replay_reuse=true",
            "--set", "server_replay_extra=kill", "--set", "connection_strategy=lazy",
            "--set", f"confdir={conf}"], reverse),
    }  # fmt: skip
    only = {t.strip() for t in args.only.split(",") if t.strip()}
    chosen = {k: v for k, v in targets.items() if not only or any(o in k for o in only)}
    own: dict[str, tuple[str, ...]] = {}  # a new_episodes target's own copy of the tape
    for name in chosen:
        if "new_episodes" in name:  # what it records stays out of the other targets' tape
            tape = db.with_name(f"tape-{len(own)}.db")
            shutil.copyfile(db, tape)
            own[name] = ("--db", str(tape))
    sent: dict[str, int] = dict.fromkeys(own, 0)
    # Every chosen target listens at once (idle but for its turn), and the bursts of a level
    # take turns: a shared machine's load drifts, and each target then meets the same drift.
    with contextlib.ExitStack() as stack:
        listen: dict[str, int] = {}
        for name, (cmd, way) in chosen.items():
            listen[name] = free_port()
            stack.enter_context(process(cmd(listen[name], *own.get(name, ())), listen[name]))
            time.sleep(0.5)
            asyncio.run(run_round(listen[name], 1, args.events, offsets, ttfbs, way))  # warm-up
        for n in levels:
            pooled: dict[str, Errors] = {name: ([], [], []) for name in chosen}
            for _ in range(args.bursts if n > 1 else 1):
                for name, (_, way) in chosen.items():
                    misses = max(1, n // 20) if name in own else 0
                    sent[name] = sent.get(name, 0) + misses
                    got = asyncio.run(run_round(listen[name], n, args.events, offsets, ttfbs, way,
                                                args.warm, misses))  # fmt: skip
                    for mine, more in zip(pooled[name], got, strict=True):
                        mine += more
            table += [(name, n, summary(pooled[name])) for name in chosen]
            print(f"done: x{n}", file=sys.stderr)
    # The recording proxies stored what they had before their replay stopped.
    stored = [(name, sent[name], states(Path(own[name][1]), len(rows)),
               recorded_gaps(Path(own[name][1]), len(rows))) for name in own]  # fmt: skip
    instant: list[tuple[str, float]] = []
    for name, (cmd, way) in chosen.items():
        if name.startswith("mitmdump"):
            continue  # it keeps no timing: its every answer is already "at once"
        port = free_port()
        with process(cmd(port, *own.get(name, ()), "--speed", "0"), port):
            asyncio.run(at_once(port, args.events, way))  # warm-up
            instant.append((name, asyncio.run(at_once(port, args.events, way))))

    floor = asyncio.run(wake_lateness())
    print(
        f"\n{RECORDINGS} recordings x {args.events} events (~20 ms gaps); absolute error "
        f"against the recorded timing, ms; one stream: {SINGLE} in a row. An idle asyncio "
        f"timer on this machine wakes {floor[0]:.2f} ms late (p50), {floor[1]:.2f} (p95)\n"
    )
    print("Set-up: connecting (with tunnel and TLS handshake) from the start of the burst, ms; "
          "it has no recorded timing to keep.\n")  # fmt: skip
    print("| replayer | streams | TTFB err p50 | TTFB err p95 | gap err p50 | gap err p95 "
          "| gap err max | set-up p95 |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, n, r in table:
        print(f"| {name} | {n} | {r['ttfb_p50']:.2f} | {r['ttfb_p95']:.2f} | {r['gap_p50']:.2f} "
              f"| {r['gap_p95']:.2f} | {r['gap_max']:.2f} | {r['setup_p95']:.1f} |")  # fmt: skip
    for name, count, by_state, gaps in stored:
        said = ", ".join(f"{k} {v}" for k, v in sorted(by_state.items())) or "none"
        kept = f"p50 {statistics.median(gaps):.2f}, p95 {pct(gaps, 0.95):.2f} ms" if gaps else "-"
        print(f"\n{name}: {count} misses sent during the bursts, stored: {said}; their stored "
              f"gaps against the simulator's plan: {kept}")  # fmt: skip
    print(f"\n--speed 0: slowest of the {RECORDINGS} recordings to arrive whole (one at a time; "
          "recorded: ~0.8 s each), ms\n")  # fmt: skip
    print("| replayer | slowest, ms |\n|---|---:|")
    for name, ms in instant:
        print(f"| {name} | {ms:.1f} |")


if __name__ == "__main__":
    main()
