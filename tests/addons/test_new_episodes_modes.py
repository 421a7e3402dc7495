"""Record mode new_episodes over HTTP/2 (h2c, and h2 in a CONNECT tunnel) and with replay
faults: a hit is answered by the replay server (the recording proxy is stopped meanwhile),
a miss is recorded once and replays at the next request."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from ssetape.simulator.simulator import Simulator
from tests.addons.test_replay_new_episodes import (
    PATH,
    episodes,
    exchanges,
    frozen,
    recording_proxy,
)
from tests.addons.test_replayer import CHAT
from tests.conftest import SIM_SPEED, Proc


def stored(db: str) -> Any:
    """The one exchange of the tape, once the recorder has stored it whole."""
    deadline = time.monotonic() + 10
    while not (xs := exchanges(db)) or xs[0].state == "recording":
        assert time.monotonic() < deadline, xs
        time.sleep(0.05)
    [x] = xs
    return x


@pytest.mark.parametrize("how", ["reverse", "forward-https"])
def test_http2_a_burst_of_one_miss_is_recorded_once_then_replayed(
    ssetape_proc: Callable[..., Proc], tmp_path: Path, confdir: Path, how: str
) -> None:
    """Reverse: HTTP/2 in clear text from the first byte (h2c, prior knowledge); forward: h2
    chosen by ALPN in the TLS of a CONNECT tunnel that the replay server ends with the CA."""
    db = str(tmp_path / "tape.db")
    # h2c has no upgrade dance here: the client speaks HTTP/2 only.
    h2 = {"http2": True} if how == "forward-https" else {"http1": False, "http2": True}

    async def burst(base: str, kw: dict[str, Any], n: int) -> list[httpx.Response]:
        # One connection, n streams on it at once.
        async with httpx.AsyncClient(timeout=30, **kw, **h2) as c:
            return list(await asyncio.gather(
                *(c.post(base + PATH, content=orjson.dumps(CHAT)) for _ in range(n))))  # fmt: skip

    with episodes(how, ssetape_proc, tmp_path, confdir, db) as (proc, base, kw):
        first = asyncio.run(burst(base, kw, 10))
        assert {(r.status_code, r.http_version) for r in first} == {(200, "HTTP/2")}
        assert len({r.content for r in first}) == 1 and b"data: [DONE]" in first[0].content
        assert stored(db).state == "completed"
        with frozen(recording_proxy(proc.proc.pid)):
            [again] = asyncio.run(burst(base, kw, 1))
        assert (again.status_code, again.http_version) == (200, "HTTP/2")
        assert again.content == first[0].content
        assert len(exchanges(db)) == 1
        assert proc.stop() == 0
    log = proc.log.decode()
    assert "ssetape: replayed 10, missed 0, recorded 1" in log, log
    assert " in 1 exchange stored" in log, log


def raw(url: str) -> tuple[int, bytes, bool]:
    """Status, the body as it came off the wire, and whether it ended well."""
    got = b""
    with httpx.stream("POST", url + PATH, content=orjson.dumps(CHAT), timeout=30) as r:
        try:
            for data in r.iter_raw():
                got += data
        except httpx.HTTPError:
            return r.status_code, got, False
    return r.status_code, got, True


def test_faults_apply_to_hits_and_a_miss_is_recorded_as_the_upstream_sent_it(
    ssetape_proc: Callable[..., Proc], tmp_path: Path
) -> None:
    db = str(tmp_path / "tape.db")
    with Simulator(speed=SIM_SPEED).serve_in_thread() as sim:
        proc = ssetape_proc("replay", "--record-mode", "new_episodes", "--mode",
                            f"reverse:{sim.url}", "--fault", "status:503,times=1",
                            "--fault", "cut:event=3", db=db)  # fmt: skip
        # A refusal comes before matching, as in record mode none: the upstream is not asked.
        status, _, _ = raw(proc.url)
        assert status == 503 and exchanges(db) == []
        # The retry is a miss: relayed whole (a fault is the replay's, never the upstream's)
        # and recorded whole.
        status, whole, ended = raw(proc.url)
        assert (status, ended) == (200, True) and whole.rstrip().endswith(b"data: [DONE]")
        assert stored(db).state == "completed"
        # The next is a hit, from the replay server, with the fault: cut after 3 events.
        with frozen(recording_proxy(proc.proc.pid)):
            status, cut, ended = raw(proc.url)
        assert (status, ended) == (200, False), cut
        assert cut.count(b"\n\n") == 3 and whole.startswith(cut), cut  # 3 stored events
        [x] = exchanges(db)
        assert x.state == "completed"
        assert proc.stop() == 0
    log = proc.log.decode()
    assert "ssetape: replayed 1, missed 0, recorded 1" in log, log


def sockets(pid: int) -> list[tuple[int, int, str]]:
    """(local port, remote port, state) of the TCP sockets process ``pid`` holds."""
    mine = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            mine.add(os.readlink(fd))
        except OSError:
            continue
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if f"socket:[{f[9]}]" in mine:
                port = [int(a.rsplit(":", 1)[1], 16) for a in (f[1], f[2])]
                found.append((port[0], port[1], f[3]))
    return found


def test_misses_one_after_another_share_a_connection_and_an_upstream_handshake(
    ssetape_proc: Callable[..., Proc], tmp_path: Path, confdir: Path
) -> None:
    """Forward HTTPS: the replay server keeps its connection to the recording proxy between
    misses, so the proxy keeps its TLS connection to the upstream too."""
    db = str(tmp_path / "tape.db")
    with episodes("forward-https", ssetape_proc, tmp_path, confdir, db) as (proc, base, kw):
        upstream = int(base.rsplit(":", 1)[1])
        for i in range(3):  # three misses, one after another, each on a new client connection
            ask = {**CHAT, "messages": [{"role": "user", "content": f"miss {i}"}]}
            with httpx.Client(timeout=30, **kw) as c:
                r = c.post(base + PATH, content=orjson.dumps(ask))
            assert r.status_code == 200 and b"data: [DONE]" in r.content
        child = recording_proxy(proc.proc.pid)
        listens = {local for local, _, state in sockets(child) if state == "0A"}
        relayed = [s for s in sockets(proc.proc.pid) if s[1] in listens and s[2] == "01"]
        forwarded = [s for s in sockets(child) if s[1] == upstream and s[2] == "01"]
        assert (len(relayed), len(forwarded)) == (1, 1), (relayed, forwarded)
        deadline = time.monotonic() + 10
        while {x.state for x in exchanges(db)} != {"completed"} or len(exchanges(db)) < 3:
            assert time.monotonic() < deadline, [x.state for x in exchanges(db)]
            time.sleep(0.05)
        assert len(exchanges(db)) == 3
        assert proc.stop() == 0
    assert "ssetape: replayed 0, missed 0, recorded 3" in proc.log.decode()
