"""`ssetape replay --workers N`: several processes on one port, their counts summed, none left
behind when the command stops or is killed; in record mode new_episodes a miss is recorded
once for all of them and replayed by each."""

from __future__ import annotations

import http.client
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from pathlib import Path
from urllib.parse import urlsplit

import orjson

from ssetape.simulator.simulator import Simulator
from tests.addons.test_replay_new_episodes import exchanges, frozen, recording_proxy
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
        (["--record-mode", "all"], "ssetape's own replay server"),
    ):
        r = subprocess.run(
            [SSETAPE, "replay", "--db", str(tmp_path / "t.db"), "--workers", "2", *extra],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, r.stderr


def connections_held(port: int, pids: list[int]) -> dict[int, int]:
    """How many established connections to ``port`` each process holds (the kernel hands
    each new connection to one of the processes listening on it)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if f[3] == "01" and int(f[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{f[9]}]")
    held = dict.fromkeys(pids, 0)
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with suppress(OSError):
                held[pid] += os.readlink(fd) in inodes
    return held


def spread(url: str, pids: list[int], n: int) -> list[http.client.HTTPConnection]:
    """``n`` connections to the replay, once every one is held by a process, each process
    holding some (the test cannot choose which worker gets one; with dozens, each gets some)."""
    port = urlsplit(url).port or 80
    conns = [http.client.HTTPConnection("127.0.0.1", port, timeout=60) for _ in range(n)]
    for c in conns:
        c.connect()
    deadline = time.monotonic() + 10
    while sum((held := connections_held(port, pids)).values()) < n:
        assert time.monotonic() < deadline, held
        time.sleep(0.02)
    assert all(held.values()), held
    return conns


def test_workers_record_a_burst_of_one_miss_once_and_each_replays_it(
    ssetape_proc: Callable[..., Proc], tmp_path: Path
) -> None:
    db = str(tmp_path / "tape.db")
    with Simulator(speed=2.0).serve_in_thread() as sim:
        proc = ssetape_proc("replay", "--record-mode", "new_episodes", "--workers", "3",
                            "--mode", f"reverse:{sim.url}", db=db)  # fmt: skip
        pids = [proc.proc.pid, *workers_of(proc.proc.pid)]
        assert len(pids) == 3
        body = orjson.dumps(CHAT)
        go = threading.Barrier(50)

        def post(c: http.client.HTTPConnection, wait: bool = False) -> tuple[int, bytes]:
            if wait:
                go.wait()
            c.request("POST", "/v1/chat/completions", body, {"content-type": "application/json"})
            r = c.getresponse()
            return r.status, r.read()

        # 50 identical misses at once, spread over the three workers.
        with ThreadPoolExecutor(50) as pool:
            burst = list(pool.map(lambda c: post(c, True), spread(proc.url, pids, 50)))
        # One upstream call, one recording; the 49 others waited for it and replayed it.
        assert {status for status, _ in burst} == {200}
        assert len({answer for _, answer in burst}) == 1 and b"data: [DONE]" in burst[0][1]
        [x] = exchanges(db)
        assert x.state == "completed"
        # The next request is a hit in every worker, answered by the replay servers alone
        # (the recording proxy is stopped meanwhile).
        conns = spread(proc.url, pids, 30)
        with frozen(recording_proxy(proc.proc.pid)), ThreadPoolExecutor(30) as pool:
            again = list(pool.map(post, conns))
        assert again == [burst[0]] * 30
    assert len(exchanges(db)) == 1
    assert proc.stop() == 0
    log = proc.log.decode()
    assert "ssetape: replayed 79, missed 0, recorded 1" in log, log
    assert " in 1 exchange stored" in log and log.count("(a miss)") == 1, log
