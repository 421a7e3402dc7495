"""`ssetape replay --workers N`: several processes on one port, their counts summed, none left
behind when the command stops or is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from tests.addons.test_replayer import CHAT, closing_request, record
from tests.conftest import SSETAPE, Proc, start_ssetape


def workers_of(pid: int) -> list[int]:
    """The replay workers a process started (its children running front_workers)."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            cmdline = (d / "cmdline").read_bytes()
        except OSError:
            continue
        if (
            int(stat.rsplit(")", 1)[1].split()[1]) == pid
            and b"ssetape.replay.direct_front" in cmdline
        ):
            found.append(int(d.name))
    return found


def gone(pids: list[int], within: float = 15.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not any(Path(f"/proc/{p}").exists() for p in pids):
            return True
        time.sleep(0.05)
    return False


def test_workers_share_the_port_and_their_counts_add_up(
    ssetape_proc: Callable[..., Proc], tmp_path: Path
) -> None:
    db = str(tmp_path / "tape.db")
    upstream, [(_, raw, _)] = record(ssetape_proc, [("/v1/chat/completions", CHAT)], db)
    proc = ssetape_proc(
        "replay", "--speed", "0", "--workers", "3", "--mode", f"reverse:{upstream}", db=db
    )
    helpers = workers_of(proc.proc.pid)
    assert len(helpers) == 2
    answers = [closing_request(proc.url, CHAT) for _ in range(60)]
    assert all(a.startswith(b"HTTP/1.1 200") and raw[-20:] in a for a in answers)
    assert closing_request(proc.url, {"other": 1}).startswith(b"HTTP/1.1 404")
    assert proc.stop() == 0
    assert b"ssetape: replayed 60, missed 1" in proc.log, proc.log.decode()
    assert gone(helpers)


def test_workers_end_with_a_killed_parent(
    ssetape_proc: Callable[..., Proc], tmp_path: Path, confdir: Path
) -> None:
    db = str(tmp_path / "tape.db")
    upstream, _ = record(ssetape_proc, [("/v1/chat/completions", CHAT)], db)
    proc = start_ssetape(
        ["replay", "--workers", "2", "--mode", f"reverse:{upstream}", "--db", db,
         "--port", "0", "--confdir", str(confdir)], db=db,
    )  # fmt: skip
    helpers = workers_of(proc.proc.pid)
    assert len(helpers) == 1
    os.kill(proc.proc.pid, signal.SIGKILL)
    assert proc.proc.wait(10) == -signal.SIGKILL
    assert gone(helpers)  # their standard input closed with it


def test_workers_refuse_what_one_process_must_do(tmp_path: Path) -> None:
    for extra, says in (
        (["--fault", "status:503"], "faults are served in order by one process"),
        (["--record-mode", "all"], "forwards nothing"),
    ):
        r = subprocess.run(
            [SSETAPE, "replay", "--db", str(tmp_path / "t.db"), "--workers", "2", *extra],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, r.stderr
