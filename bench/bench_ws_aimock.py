"""WebSocket replay beside aimock (Node): one OpenAI Realtime session recorded through
`ssetape record`, then served N times by `ssetape replay` (from the tape) and by aimock (from
a fixture made of the same recording), to the same client; each frame against the recording.

    python -m bench.bench_ws_aimock [--rounds 20] [--deltas 30] [--think 0.3]

The session: the official openai SDK's Realtime client (``client.realtime.connect``) sends a
``conversation.item.create`` and a ``response.create`` to the simulator's Realtime API
(ssetape.simulator.ws_realtime, timed by :func:`plan`: ``response.created`` after 45 ms, the
first of ``--deltas`` text deltas at 260 ms, the others 20-40 ms apart, ``response.done``
with usage), recorded once in reverse mode; the upstream is then stopped.

aimock (the npm package ``@copilotkit/aimock``, installed once with ``npm install --prefix``
into ~/.cache/ssetape-bench/aimock, outside the repo) cannot record a Realtime session from an
upstream: its fixture is written from the recording, as faithfully as its format allows (the
whole text, ``chunkSize`` the deltas' common length, ``recordedTimings`` with the recorded
first-delta delay and the recorded gaps between deltas), and served by its CLI (``llmock -f``).

Each round, interleaved, one session on each server by a raw `websockets` asyncio client
that sends the recorded client frames byte for byte (what the SDK sent) with ``--think``
seconds before each (longer than the recorded client waited: the answer must count from the
client's frame) and stamps each frame as it arrives. Reported against the recorded offsets:
the answer's first frame (its delay after ``response.create``), its first delta, every gap
between consecutive frames of the answer, its last frame, and how many server frames came
byte for byte. If one server cannot be run, its column says why and the other is measured.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import math
import os
import platform
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path

import openai
import orjson
import websockets
from openai.types.realtime import RealtimeConversationItemUserMessageParam
from websockets.asyncio.client import ClientConnection, connect

from bench.bench_record import BIN, free_port
from ssetape.simulator.simulator import Simulator
from ssetape.simulator.ws_realtime import RealtimePlan
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store

__all__ = ["main"]

AIMOCK = "1.43.0"
CACHE = Path.home() / ".cache" / "ssetape-bench" / "aimock"
PROMPT = "Count to thirty, please."
KEY = "sk-bench-realtime"
MODEL = "gpt-realtime"
USAGE = {  # openai's RealtimeResponseUsage
    "total_tokens": 131,
    "input_tokens": 41,
    "output_tokens": 90,
    "input_token_details": {"text_tokens": 41, "audio_tokens": 0, "cached_tokens": 0},
    "output_token_details": {"text_tokens": 90, "audio_tokens": 0},
}
TIMEOUT = 10.0  # seconds a client waits for a frame before it calls the round failed

Frames = list[tuple[float, bytes]]  # (seconds, payload)


class Unavailable(Exception):
    """A server the bench cannot run here: its column says why."""


@dataclass
class Recording:
    client: Frames  # offsets from the upgrade
    server: Frames
    asked: float  # the response.create's offset
    answer: Frames  # the server frames after it, offsets from it


def plan(deltas: int) -> RealtimePlan:
    """The upstream's answer, timed ahead so the recording's offsets are known, each from the
    ``response.create``: ``response.created`` at 45 ms with the item and part frames, the first
    delta at 260 ms, the next ones 20-40 ms apart (seeded jitter), the four ``*.done`` frames
    at once after the last delta and ``response.done`` 15 ms later, as the GA API sends them.

    Every delta is the same number of characters ("01, ", "02, ", ...): aimock cuts a
    fixture's text into chunks of one size, and equal deltas let it send the very texts
    recorded (the best case for it; real deltas are uneven)."""
    texts = tuple(f"{i:02d}, " for i in range(1, deltas + 1))
    return RealtimePlan.jittered(texts, first=0.260, gap=(0.020, 0.040), seed=42,
                                 created=0.045, done=0.015, usage=USAGE, items=True)  # fmt: skip


def shape(data: bytes) -> tuple[str, object]:
    """A frame's type and its text delta, if any: what a client reads of it."""
    with contextlib.suppress(orjson.JSONDecodeError, AttributeError):
        obj = orjson.loads(data)
        return str(obj.get("type")), obj.get("delta")
    return "?", None


def kind(data: bytes) -> str:
    return shape(data)[0]


def record(url: str, db: Path) -> None:
    """One session through `ssetape record` in reverse mode, the openai SDK as the client."""
    port = free_port()
    cmd = [str(BIN / "ssetape"), "record", "--mode", f"reverse:{url}", "--db", str(db),
           "--port", str(port)]  # fmt: skip
    with serving(cmd, port, db.with_suffix(".record.log")):
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY,
                               max_retries=0)  # fmt: skip
        with client.realtime.connect(model=MODEL) as conn:
            conn.recv_bytes()  # session.created
            item: RealtimeConversationItemUserMessageParam = {
                "type": "message", "role": "user",
                "content": [{"type": "input_text", "text": PROMPT}],
            }  # fmt: skip
            conn.conversation.item.create(item=item)
            while b'"conversation.item.added"' not in conn.recv_bytes():
                pass
            conn.response.create()
            while b'"response.done"' not in conn.recv_bytes():
                pass


def recorded(db: Path) -> Recording:
    with Store.open(str(db), create=False) as store:
        q = Queries(store)
        (x,) = q.exchanges(limit=2)
        events = list(q.events(x.id))
    client = [(e.offset_us / 1e6, bytes(e.raw)) for e in events if e.direction == "client"]
    server = [(e.offset_us / 1e6, bytes(e.raw)) for e in events if e.direction == "server"]
    asked = next(at for at, data in client if kind(data) == "response.create")
    answer = [(at - asked, data) for at, data in server if at >= asked]
    return Recording(client, server, asked, answer)


@contextlib.contextmanager
def serving(cmd: list[str], port: int, log: Path, timeout: float = 30) -> Iterator[None]:
    """A server process, once its port takes connections; Unavailable (with its log's tail) if
    it exits or never listens."""
    try:
        with log.open("wb") as out:
            p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    except OSError as e:
        raise Unavailable(f"{cmd[0]} did not start: {e}") from e
    try:
        end = time.monotonic() + timeout
        while True:
            if p.poll() is not None:
                tail = log.read_text(errors="replace").strip().splitlines()[-3:]
                raise Unavailable(f"exited {p.returncode}: {' / '.join(tail)}")
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            if time.monotonic() > end:
                raise Unavailable(f"nothing listened on {port} within {timeout:.0f} s")
            time.sleep(0.05)
        yield
    finally:
        p.terminate()
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def install_aimock(version_: str) -> tuple[Path, str]:
    """aimock's CLI (installed into the cache once) and its version."""
    pkg = CACHE / "node_modules" / "@copilotkit" / "aimock"
    meta = pkg / "package.json"
    if not meta.exists() or orjson.loads(meta.read_bytes())["version"] != version_:
        try:
            subprocess.run(["npm", "install", "--prefix", str(CACHE), "--no-audit", "--no-fund",
                            f"@copilotkit/aimock@{version_}"], check=True,
                           capture_output=True, timeout=300)  # fmt: skip
        except (OSError, subprocess.SubprocessError) as e:
            raise Unavailable(f"npm install @copilotkit/aimock@{version_} failed: {e}") from e
    installed = str(orjson.loads(meta.read_bytes())["version"])
    return pkg / "dist" / "cli.js", installed


def aimock_fixture(rec: Recording, path: Path) -> None:
    """The recording as an aimock fixture, as close as its format goes: the text, cut into the
    recorded deltas (all one length), and the recorded timing of the deltas. The other frames'
    timing, ids, usage and key order have no place in it."""
    deltas = [(at, orjson.loads(d)["delta"]) for at, d in rec.answer
              if kind(d) == "response.output_text.delta"]  # fmt: skip
    sizes = {len(text) for _, text in deltas}
    assert len(sizes) == 1, f"deltas of several lengths: {sizes}"
    gaps = [round((b - a) * 1000, 3) for (a, _), (b, _) in itertools.pairwise(deltas)]
    fixture = {
        "match": {"userMessage": PROMPT},
        "response": {"content": "".join(text for _, text in deltas)},
        "chunkSize": sizes.pop(),
        "recordedTimings": {
            "ttftMs": round(deltas[0][0] * 1000, 3),
            "interChunkDelaysMs": gaps,
            "totalDurationMs": round(deltas[-1][0] * 1000, 3),
        },
    }
    path.write_bytes(orjson.dumps({"fixtures": [fixture]}, option=orjson.OPT_INDENT_2))


async def session(base: str, rec: Recording, think: float) -> tuple[float, Frames]:
    """One session on ``base``: the recorded client frames, each after ``think`` s and after
    the frames recorded before it came. When the response.create went, and every server frame
    with when it came."""
    url = base.replace("http://", "ws://") + f"/v1/realtime?model={MODEL}"
    got: Frames = []
    asked = 0.0
    # The server frames each client frame waits for: as many as the recording has before it.
    before = [sum(1 for s, _ in rec.server if s < c) for c, _ in rec.client]
    async with connect(url, additional_headers={"Authorization": f"Bearer {KEY}"}) as ws:
        for (_, frame), wait_for in zip(rec.client, before, strict=True):
            while len(got) < wait_for:
                got.append(await _recv(ws))
            await asyncio.sleep(think)
            if kind(frame) == "response.create":
                asked = time.monotonic()
            await ws.send(frame.decode())
        while not got or kind(got[-1][1]) not in ("response.done", "error"):
            got.append(await _recv(ws))
    return asked, got


async def _recv(ws: ClientConnection) -> tuple[float, bytes]:
    data = await asyncio.wait_for(ws.recv(decode=False), TIMEOUT)
    return time.monotonic(), data


def pct(values: list[float], q: float) -> float:
    """The nearest-rank percentile (p95 of 20 values: the largest but one)."""
    s = sorted(values)
    return s[max(0, math.ceil(q * len(s)) - 1)]


@dataclass
class Column:
    name: str
    base: str = ""
    note: str | None = None  # why it has no figures
    rounds: int = 0
    failed: list[str] = field(default_factory=list)
    first: list[float] = field(default_factory=list)  # signed errors, ms
    ttft: list[float] = field(default_factory=list)
    last: list[float] = field(default_factory=list)
    gaps: list[float] = field(default_factory=list)  # absolute errors, ms
    delta_gaps: list[float] = field(default_factory=list)  # the same, between two deltas
    same_kinds: int = 0
    identical: int = 0
    frames: int = 0
    usage: int = 0

    def add(self, rec: Recording, asked: float, got: Frames) -> None:
        self.rounds += 1
        answer = [(at - asked, d) for at, d in got if at >= asked]
        self.same_kinds += [shape(d) for _, d in answer] == [shape(d) for _, d in rec.answer]
        self.identical += sum(a == b for (_, a), (_, b) in zip(got, rec.server, strict=False))
        self.frames += len(rec.server)
        self.first.append((answer[0][0] - rec.answer[0][0]) * 1000)
        self.last.append((answer[-1][0] - rec.answer[-1][0]) * 1000)
        self.ttft.append((first_delta(answer) - first_delta(rec.answer)) * 1000)
        gaps = [b - a for (a, _), (b, _) in itertools.pairwise(answer)]
        then = [b - a for (a, _), (b, _) in itertools.pairwise(rec.answer)]
        errors = [abs(g - r) * 1000 for g, r in zip(gaps, then, strict=False)]
        self.gaps += errors
        pairs = itertools.pairwise(kind(d) for _, d in rec.answer)
        self.delta_gaps += [e for e, (a, b) in zip(errors, pairs, strict=False)
                            if a == b == "response.output_text.delta"]  # fmt: skip
        done = [orjson.loads(d)["response"].get("usage") for _, d in answer
                if kind(d) == "response.done"]  # fmt: skip
        recorded_usage = orjson.loads(rec.answer[-1][1])["response"]["usage"]
        self.usage += done == [recorded_usage]

    def cells(self) -> list[str]:
        if self.note is not None or not self.rounds:
            return [self.note or "no round completed"] + [""] * (len(ROWS) - 1)

        def spread(v: list[float], signed: bool = True) -> str:
            a = [abs(x) for x in v]
            mid = f"{statistics.median(v):+.1f}" if signed else f"{statistics.median(a):.2f}"
            return f"{mid} / {pct(a, 0.95):.1f} / {max(a):.1f}"

        n = self.rounds
        return [
            f"{n} of {n + len(self.failed)}",
            spread(self.first),
            spread(self.ttft),
            spread(self.gaps, signed=False),
            spread(self.delta_gaps, signed=False),
            spread(self.last),
            f"{self.same_kinds} of {n}",
            f"{self.identical} of {self.frames}",
            f"{self.usage} of {n}",
        ]


def first_delta(frames: Frames) -> float:
    return next(at for at, d in frames if kind(d) == "response.output_text.delta")


ROWS = [
    "sessions completed",
    "first frame of the answer: error, ms (median signed / p95 / max)",
    "first delta: error, ms (median signed / p95 / max)",
    "gap error, every gap of the answer, ms (p50 / p95 / max)",
    "gap error, between two deltas only, ms (p50 / p95 / max)",
    "last frame: error, ms (median signed / p95 / max)",
    "the recorded event types and delta texts, in order",
    "server frames byte for byte",
    "response.done carries the recorded usage",
]


def table(cols: list[Column]) -> None:
    print("| | " + " | ".join(c.name for c in cols) + " |")
    print("|---|" + "---:|" * len(cols))
    cells = [c.cells() for c in cols]
    for i, row in enumerate(ROWS):
        print(f"| {row} | " + " | ".join(c[i] for c in cells) + " |")
    for c in cols:
        if c.failed:
            print(f"  {c.name}: {len(c.failed)} rounds failed, first: {c.failed[0]}")


def node_version() -> str:
    try:
        out = subprocess.run(["node", "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "none"
    return out.stdout.strip() or "none"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--deltas", type=int, default=30)
    ap.add_argument("--think", type=float, default=0.3)
    ap.add_argument("--aimock-version", default=AIMOCK)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-ws-aimock-") as tmp:
        run(args, Path(tmp))


def run(args: argparse.Namespace, tmp: Path) -> None:
    db = tmp / "tape.db"
    with Simulator(realtime=plan(args.deltas)).serve_in_thread() as upstream:
        url = upstream.url
        record(url, db)
    rec = recorded(db)
    gaps = [(b[0] - a[0]) * 1000 for a, b in itertools.pairwise(rec.answer)]
    print(f"recorded: {len(rec.server)} server frames, {len(rec.answer)} in the answer to "
          f"response.create: first {rec.answer[0][0] * 1000:.1f} ms after it, first delta "
          f"{first_delta(rec.answer) * 1000:.1f} ms, last {rec.answer[-1][0] * 1000:.1f} ms; "
          f"gaps median {statistics.median(gaps):.1f} ms")  # fmt: skip
    ours, theirs = Column("ssetape replay"), Column("aimock")
    aimock_version = "not installed"
    with contextlib.ExitStack() as stack:
        port = free_port()
        cmd = [str(BIN / "ssetape"), "replay", "--mode", f"reverse:{url}", "--db", str(db),
               "--port", str(port)]  # fmt: skip
        try:
            stack.enter_context(serving(cmd, port, tmp / "replay.log"))
            ours.base = f"http://127.0.0.1:{port}"
        except Unavailable as e:
            ours.note = f"not available yet ({e})"
        try:
            cli, aimock_version = install_aimock(args.aimock_version)
            aimock_fixture(rec, tmp / "aimock.json")
            port = free_port()
            cmd = ["node", str(cli), "-p", str(port), "-h", "127.0.0.1", "-f",
                   str(tmp / "aimock.json"), "--log-level", "warn"]  # fmt: skip
            stack.enter_context(serving(cmd, port, tmp / "aimock.log"))
            theirs.base = f"http://127.0.0.1:{port}"
        except Unavailable as e:
            theirs.note = f"not available ({e})"
        cols = [ours, theirs]
        asyncio.run(rounds(cols, rec, args.rounds, args.think))
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"ssetape {version('ssetape')}, aimock {aimock_version} on node {node_version()}, "
          f"Python {platform.python_version()}, websockets {version('websockets')}, "
          f"openai {openai.__version__} (recording client); {args.rounds} rounds, think "
          f"{args.think} s; load average {load}")  # fmt: skip
    table(cols)


async def rounds(cols: list[Column], rec: Recording, n: int, think: float) -> None:
    for col in cols:  # warm: first connections, the tape's load, node's JIT
        if col.note is None:
            try:
                await session(col.base, rec, 0.0)
            except (OSError, TimeoutError, websockets.WebSocketException) as e:
                col.note = f"not available yet ({type(e).__name__}: {e})"
    for _ in range(n):
        for col in cols:  # interleaved: both at the same moment of the machine
            if col.note is not None:
                continue
            try:
                asked, got = await session(col.base, rec, think)
            except (OSError, TimeoutError, websockets.WebSocketException) as e:
                col.failed.append(f"{type(e).__name__}: {e}")
                continue
            if not any(kind(d) == "response.output_text.delta" for _, d in got):
                col.failed.append("no delta in: " + ", ".join(kind(d) for _, d in got))
                continue
            col.add(rec, asked, got)


if __name__ == "__main__":
    main()
