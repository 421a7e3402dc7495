"""More replay processes on the direct front's port: ``ssetape replay --workers N``.

One event loop accepts, parses and schedules every stream of a burst: with 200 clients at once
the last first byte waits for the 199 before it. Here the kernel spreads new connections over
N processes that each listen on the same port (``SO_REUSEPORT``), each with its own store
connection, request index and player, so a burst costs each loop a share.

The process that runs ``ssetape replay`` is worker 0; it starts the others as
``python -m ssetape.replay.direct_front``, each reading its settings as one JSON line on
standard input (:class:`WorkerSpec`), printing ``ready`` once it listens, and ``counts HITS
MISSES RECORDED`` when it stops: on SIGTERM, or when its standard input closes (its parent
went away). Each worker keeps its own order for a request recorded several times. In record
mode new_episodes each relays its misses to the one recording proxy (its port in the spec)
and claims a miss before it records it (see :class:`~ssetape.replay.episodes.Claims`).
"""

from __future__ import annotations

import contextlib
import selectors
import subprocess
import sys
from dataclasses import asdict, dataclass

import orjson

__all__ = ["FrontWorkers", "WorkerSpec"]

START_TIMEOUT = 60.0  # seconds a worker may take to open the store and listen
STOP_TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """What a worker serves: the arguments of :func:`~ssetape.replay.direct_front.run_front`
    that cross to the other processes (the port is the one worker 0 bound)."""

    db: str
    upstream: str
    host: str
    port: int
    speed: float
    ignore: list[str]
    match_host: bool
    repeat: bool
    allow_gaps: bool
    redact_headers: list[str]
    redact_fields: list[str]
    confdir: str | None
    slots: int  # handshakes each process lets run at once (its share of one budget)
    recorder: int | None = None  # new_episodes: the recording proxy's port, one for all
    claims: str | None = None  # new_episodes: where a worker claims the miss it records
    log: list[str] | None = None  # worker 0's log lines: [instance name, format]

    def to_line(self) -> bytes:
        return orjson.dumps(asdict(self)) + b"\n"

    @classmethod
    def from_line(cls, line: bytes) -> WorkerSpec:
        return cls(**orjson.loads(line))


class FrontWorkers:
    """Workers 1..N-1: started once worker 0 listens, stopped with it, their counts summed."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, spec: WorkerSpec) -> None:
        """Start the workers and wait until each listens (blocking: call it off the loop).
        RuntimeError if one cannot."""
        cmd = [sys.executable, "-m", "ssetape.replay.direct_front"]
        for _ in range(self.count):
            p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            self.procs.append(p)
            assert p.stdin is not None
            p.stdin.write(spec.to_line())
            p.stdin.flush()  # kept open: the worker exits when it closes
        for p in self.procs:
            assert p.stdout is not None
            line = _line(p, START_TIMEOUT)
            if line != b"ready":
                self.stop()
                said = line.decode(errors="replace") or "nothing"
                raise RuntimeError(f"a replay worker did not start (it said {said})")

    def stop(self) -> tuple[int, int, int]:
        """Stop every worker: (requests replayed, requests missed, misses relayed to be
        recorded) over all of them."""
        hits = misses = recorded = 0
        for p in self.procs:
            with contextlib.suppress(OSError):
                p.terminate()
        for p in self.procs:
            try:
                out, _ = p.communicate(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                p.kill()
                out, _ = p.communicate()
            for line in out.splitlines():
                words = line.split()
                if len(words) == 4 and words[0] == b"counts":
                    hits, misses = hits + int(words[1]), misses + int(words[2])
                    recorded += int(words[3])
        self.procs.clear()
        return hits, misses, recorded


def _line(p: subprocess.Popen[bytes], timeout: float) -> bytes:
    """The worker's next line of output, or b"" if it exits or says nothing in time."""
    assert p.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(p.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            return b""
    return p.stdout.readline().strip()
