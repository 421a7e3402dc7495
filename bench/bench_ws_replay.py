"""WebSocket replay timing: one OpenAI Realtime session (many deltas) recorded through
`ssetape record`, replayed N times by `ssetape replay` to the official openai SDK's Realtime
client, each frame's timing against the recording.

    python -m bench.bench_ws_replay [--deltas 200] [--rounds 10] [--think 0.3]

The simulator's Realtime API (``session.created`` at once; on ``response.create`` a
``response.created``, ``--deltas`` text deltas 5-30 ms apart with a fixed jitter, each at its
deadline from the ``response.create``, and ``response.done``) is recorded once through
`ssetape record` in reverse mode, with the SDK as the client, then stopped: every replay is
from the tape. Each replay round opens the session,
waits ``--think`` seconds (longer than the recorded client did: the answer must count from the
client's frame, not from the upgrade), sends the same ``response.create`` and stamps each frame
as the SDK hands it over (``recv_bytes``). Reported against the recorded offsets: the answer's
first frame (its delay after the client's frame), every gap between consecutive server frames,
and whether every frame came byte for byte. Goals (issue 42): gap error p95 <= 2 ms, first
frame within 5 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import openai
from websockets.asyncio.client import connect as connect_async

from bench.bench_record import BIN, free_port, process
from ssetape.simulator.simulator import Simulator
from ssetape.simulator.ws_realtime import RealtimePlan
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store

MODEL = "gpt-realtime-bench"


def gaps_ms(deltas: int, seed: int = 42) -> list[float]:
    """The upstream's pauses before each delta: 5-30 ms, a token's pace with jitter."""
    rng = random.Random(seed)
    return [rng.uniform(5, 30) for _ in range(deltas)]


def plan(deltas: int) -> RealtimePlan:
    """A response of ``deltas`` text deltas, each a pause of :func:`gaps_ms` after the one
    before (deadlines from the ``response.create``: the pauses do not drift)."""
    at = itertools.accumulate(ms / 1000 for ms in gaps_ms(deltas))
    return RealtimePlan(texts=tuple(f"tok{i} " for i in range(deltas)), at=tuple(at))


Heard = tuple[float, list[tuple[float, bytes]]]  # when the client's frame went; the answer


def session(base: str, think: float) -> Heard:
    """One Realtime session through ``base`` (the SDK's own client): when the client's frame
    went, and each frame of the answer with when the SDK handed it over."""
    client = openai.OpenAI(base_url=base + "/v1", api_key="sk-bench", max_retries=0)
    got: list[tuple[float, bytes]] = []
    with client.realtime.connect(model=MODEL) as conn:
        conn.recv_bytes()  # session.created
        time.sleep(think)
        asked = time.monotonic()
        conn.response.create()
        while True:
            data = conn.recv_bytes()
            got.append((time.monotonic(), data))
            if b'"response.done"' in data:
                break
    return asked, got


async def session_async(base: str, think: float) -> Heard:
    """The same with the `websockets` asyncio client in this thread: no hand-over between
    threads (the SDK's sync client reads in a thread of its own), the replay's own figure."""
    url = base.replace("http://", "ws://") + f"/v1/realtime?model={MODEL}"
    got: list[tuple[float, bytes]] = []
    async with connect_async(url) as ws:
        await ws.recv(decode=False)
        await asyncio.sleep(think)
        asked = time.monotonic()
        await ws.send('{"type": "response.create"}')
        while True:
            data = await ws.recv(decode=False)
            got.append((time.monotonic(), data))
            if b'"response.done"' in data:
                break
    return asked, got


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def recorded(db: Path) -> tuple[float, list[tuple[float, bytes]]]:
    """The recording: the client frame's offset and the answer's frames with theirs (s)."""
    with Store.open(str(db), create=False) as store:
        q = Queries(store)
        (x,) = q.exchanges(limit=2)
        events = list(q.events(x.id))
    asked = next(e.offset_us for e in events if e.direction == "client") / 1e6
    answer = [(e.offset_us / 1e6, bytes(e.raw)) for e in events
              if e.direction == "server" and e.offset_us / 1e6 >= asked]  # fmt: skip
    return asked, answer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--deltas", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--think", type=float, default=0.3)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-ws-"))
    db = tmp / "tape.db"
    with Simulator(realtime=plan(args.deltas)).serve_in_thread() as upstream:
        url = upstream.url
        port = free_port()
        cmd = [str(BIN / "ssetape"), "record", "--mode", f"reverse:{url}", "--db", str(db),
               "--port", str(port)]  # fmt: skip
        with process(cmd, port):
            session(f"http://127.0.0.1:{port}", 0.02)
    rec_asked, rec = recorded(db)
    first_rec = rec[0][0] - rec_asked
    rec_gaps = [b[0] - a[0] for a, b in itertools.pairwise(rec)]
    median = statistics.median(rec_gaps) * 1000
    print(f"recorded: {len(rec)} server frames in the answer, first {first_rec * 1000:.1f} ms "
          f"after the client's frame, gaps median {median:.1f} ms")  # fmt: skip
    port = free_port()
    cmd = [str(BIN / "ssetape"), "replay", "--mode", f"reverse:{url}", "--db", str(db),
           "--port", str(port)]  # fmt: skip
    clients: dict[str, Callable[[str, float], Heard]] = {
        "openai SDK (sync)": session,
        "websockets asyncio": lambda base, think: asyncio.run(session_async(base, think)),
    }
    first_err: dict[str, list[float]] = {name: [] for name in clients}
    gap_err: dict[str, list[float]] = {name: [] for name in clients}
    identical = 0
    with process(cmd, port):
        base = f"http://127.0.0.1:{port}"
        session(base, 0.0)  # warm: the SDK's imports, the tape's load
        for _ in range(args.rounds):
            for name, run in clients.items():  # interleaved: the same machine's moment
                asked, got = run(base, args.think)
                identical += [d for _, d in got] == [d for _, d in rec]
                first_err[name].append(((got[0][0] - asked) - first_rec) * 1000)
                gaps = [b[0] - a[0] for a, b in itertools.pairwise(got)]
                gap_err[name] += [abs(g - r) * 1000 for g, r in zip(gaps, rec_gaps, strict=True)]
    rounds = args.rounds * len(clients)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"rounds: {rounds}, byte for byte: {identical}/{rounds}; load average {load}")
    print("| client | gaps | gap err p50 | gap err p95 | gap err max "
          "| first frame err p50 | p95 | max |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in clients:
        gap, first = gap_err[name], [abs(e) for e in first_err[name]]
        print(f"| {name} | {len(gap)} | {statistics.median(gap):.2f} | {pct(gap, 0.95):.2f} | "
              f"{max(gap):.2f} | {statistics.median(first):.2f} | {pct(first, 0.95):.2f} | "
              f"{max(first):.2f} |")  # fmt: skip
        signed = ", ".join(f"{e:+.2f}" for e in first_err[name])
        print(f"  {name}: first frame errors, signed (ms): {signed}")


if __name__ == "__main__":
    main()
