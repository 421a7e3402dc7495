"""Fixtures shared by the end-to-end tests: the simulated upstream and real ssetape processes."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ssetape.simulator import Simulator

SSETAPE = str(Path(sys.executable).parent / "ssetape")
# Fast enough for a quick suite, slow enough that gaps (~10 ms) stand out from noise.
SIM_SPEED = 2.0
LISTEN = re.compile(rb"listening on http://([\d.]+):(\d+)")


@pytest.fixture(scope="session")
def sim() -> Iterator[Simulator]:
    with Simulator(speed=SIM_SPEED).serve_in_thread() as s:
        yield s


@dataclass
class Proc:
    """A running `ssetape` command (record/replay) whose output is collected."""

    proc: subprocess.Popen[bytes]
    url: str
    db: str
    output: list[bytes] = field(default_factory=list)

    def stop(self, timeout: float = 20) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout)
        return rc

    @property
    def log(self) -> bytes:
        return b"".join(self.output)


def start_ssetape(args: list[str], *, db: str, env: dict[str, str] | None = None,
                  timeout: float = 30) -> Proc:  # fmt: skip
    proc = subprocess.Popen(
        [SSETAPE, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {})},
    )
    assert proc.stdout is not None
    output: list[bytes] = []
    ready = threading.Event()
    found: list[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            output.append(line)
            m = LISTEN.search(line)
            if m and not found:
                found.append(f"http://{m.group(1).decode()}:{m.group(2).decode()}")
                ready.set()
        ready.set()

    threading.Thread(target=pump, daemon=True).start()
    if not ready.wait(timeout) or not found:
        proc.kill()
        raise RuntimeError(f"ssetape {args[0]} did not start: {b''.join(output).decode()}")
    return Proc(proc, found[0], db, output)


@pytest.fixture(scope="session")
def confdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One mitmproxy CA for the session: generating a key per test is slow."""
    return tmp_path_factory.mktemp("confdir")


@pytest.fixture
def ssetape_proc(tmp_path: Path, confdir: Path) -> Iterator[Callable[..., Proc]]:
    """Start `ssetape <args>`; every process is stopped (SIGTERM) and must exit 0."""
    started: list[Proc] = []

    def start(*args: str, db: str | None = None, env: dict[str, str] | None = None) -> Proc:
        db = db or str(tmp_path / "tape.db")
        p = start_ssetape([*args, "--db", db, "--port", "0", "--confdir",
                           str(confdir)], db=db, env=env)  # fmt: skip
        started.append(p)
        return p

    yield start
    for p in started:
        rc = p.stop()
        assert rc == 0, p.log.decode()
