"""`ssetape replay --record-mode new_episodes`: hits served by the replay server itself, a
miss relayed once to the recording proxy, and replayed from the tape at the next request."""

from __future__ import annotations

import os
import signal
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from ssetape.simulator.simulator import Simulator
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from tests.addons.test_replayer import CHAT, timed
from tests.conftest import SIM_SPEED, Proc, tls_simulator

PATH = "/v1/chat/completions"


def exchanges(db: str) -> list[Any]:
    with Store.open(db, create=False) as store:
        return list(Queries(store).exchanges())


def children(pid: int, word: bytes) -> list[int]:
    """The processes ``pid`` started whose command line has the argument ``word``."""
    found = []
    for d in Path("/proc").iterdir():
        try:
            stat, cmdline = (d / "stat").read_text(), (d / "cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid and word in cmdline.split(b"\0"):
            found.append(int(d.name))
    return found


def recording_proxy(pid: int) -> int:
    """The recording proxy (`ssetape record`: mitmproxy and the recorder) of the new_episodes
    replay whose process is ``pid``."""
    [child] = children(pid, b"record")
    return child


@contextmanager
def frozen(pid: int) -> Iterator[None]:
    """The process stopped (SIGSTOP) meanwhile: a request answered then was answered without
    it. How a test tells that a hit is the replay server's, not mitmproxy's."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


@contextmanager
def episodes(
    how: str, start: Callable[..., Proc], tmp_path: Path, confdir: Path, db: str
) -> Iterator[tuple[Proc, str, dict[str, Any]]]:
    """A new_episodes replay in front of a live simulator: (proc, base URL, client kwargs)."""
    if how == "forward-https":
        with tls_simulator(tmp_path) as (sim, cert):
            proc = start("replay", "--record-mode", "new_episodes",
                         "--set", f"ssl_verify_upstream_trusted_ca={cert}", db=db)  # fmt: skip
            ca = ssl.create_default_context(cafile=confdir / "mitmproxy-ca-cert.pem")
            yield proc, sim.url.replace("127.0.0.1", "localhost"), {"proxy": proc.url, "verify": ca}
        return
    with Simulator(speed=SIM_SPEED).serve_in_thread() as sim:
        if how == "reverse":
            proc = start("replay", "--record-mode", "new_episodes", "--mode",
                         f"reverse:{sim.url}", db=db)  # fmt: skip
            yield proc, proc.url, {}
        else:
            proc = start("replay", "--record-mode", "new_episodes", db=db)
            yield proc, sim.url, {"proxy": proc.url}


@pytest.mark.parametrize("how", ["reverse", "forward-http", "forward-https"])
def test_a_burst_of_one_miss_is_recorded_once_then_replayed_by_the_replay_server(
    ssetape_proc: Callable[..., Proc], tmp_path: Path, confdir: Path, how: str
) -> None:
    db = str(tmp_path / "tape.db")
    with episodes(how, ssetape_proc, tmp_path, confdir, db) as (proc, base, kw):
        go = threading.Barrier(10)

        def post(_: int) -> tuple[int, bytes]:
            with httpx.Client(timeout=30, **kw) as c:
                go.wait()  # ten identical misses at once
                r = c.post(base + PATH, content=orjson.dumps(CHAT))
                return r.status_code, r.content

        with ThreadPoolExecutor(10) as pool:
            burst = list(pool.map(post, range(10)))
        # Every client got the stream; the upstream was asked once and it was stored once.
        assert {status for status, _ in burst} == {200}
        assert len({body for _, body in burst}) == 1
        assert b"data: [DONE]" in burst[0][1]
        [x] = exchanges(db)
        assert x.state == "completed"
        # The next identical request is a hit: served from the tape, nothing new recorded,
        # by the replay server (mitmproxy, stopped meanwhile, could not have answered).
        with httpx.Client(timeout=30, **kw) as c, frozen(recording_proxy(proc.proc.pid)):
            again = c.post(base + PATH, content=orjson.dumps(CHAT))
        assert (again.status_code, again.content) == burst[0]
        assert len(exchanges(db)) == 1
        assert proc.stop() == 0
    log = proc.log.decode()
    # What a user sees at the stop: the replay server answered ten requests from the tape
    # (nine that waited for the recording, and the next), the recording proxy saw one.
    assert "ssetape: replayed 10, missed 0, recorded 1" in log, log
    assert " in 1 exchange stored" in log, log
    assert "listening on" in log and log.count("listening on") == 1, log


def test_hits_keep_their_timing_while_a_miss_is_being_recorded(
    ssetape_proc: Callable[..., Proc], sim: Simulator, tmp_path: Path
) -> None:
    db = str(tmp_path / "tape.db")
    proc = ssetape_proc("replay", "--record-mode", "new_episodes", "--mode",
                        f"reverse:{sim.url}", db=db)  # fmt: skip
    hit = {**CHAT, "model": "sim-pause"}  # its stored events are the blocks a client parses
    assert timed(proc.url, PATH, hit)[0] == 200  # a miss: recorded
    # The client has the whole answer before the recording process has stored its last
    # events: their offsets are read once the exchange is no longer recording.
    deadline = time.monotonic() + 10
    while (x := exchanges(db)[0]).state == "recording":
        assert time.monotonic() < deadline, x.state
        time.sleep(0.05)
    with Store.open(db, create=False) as store:
        offsets = [e.offset_us / 1e6 for e in Queries(store).events(x.id)]
    slow = {**CHAT, "model": "sim-pause", "messages": [{"role": "user", "content": "slow"}]}
    with ThreadPoolExecutor(4) as pool:
        miss = pool.submit(timed, proc.url, PATH, slow)  # upstream for a second or so
        hits = [pool.submit(timed, proc.url, PATH, hit) for _ in range(3)]
        results = [h.result() for h in hits]
        assert miss.result()[0] == 200
    for status, _, times in results:
        assert status == 200 and len(times) == len(offsets)
        late = [t - o for t, o in zip(times, offsets, strict=True)]
        assert min(late) > -0.002, late
        # Wide margins (a busy CI machine): what matters is that no event waits for the
        # stream being recorded beside it (through mitmproxy, the loaded loop is the cause).
        assert late[0] < 0.25 and max(late) - late[0] < 0.15, late
        errors = sorted(abs((times[i] - times[i - 1]) - (offsets[i] - offsets[i - 1]))
                        for i in range(1, len(times)))  # fmt: skip
        assert errors[len(errors) // 2] < 0.005, errors
    assert len(exchanges(db)) == 2  # the slow one joined the tape
    assert proc.stop() == 0
    assert "replayed 3, missed 0, recorded 2" in proc.log.decode()
