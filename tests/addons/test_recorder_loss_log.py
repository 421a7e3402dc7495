"""Losses are said in the log: a recording process that falls behind or stalls is logged when
it starts and when it ends, with the ledger's counts, and `ssetape stats --runs` shows a
stalled one ``stalled``; every line has a date, a level and the instance's name.

The recording process is stopped (SIGSTOP) while a stream passes a proxy allowed 1 MB of
backlog: what the proxy cannot hold is dropped and counted, as in test_recorder_ledger.
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson

from ssetape.storage.runs import STALL_AFTER, Runs
from ssetape.storage.store import Store
from tests.addons.stores import Recorders, recording_process, wait_for
from tests.addons.test_recorder_stop import EXIT, HEAD, received, sse_events
from tests.conftest import SSETAPE, Proc
from tests.upstreams import read_request, serving

LINE = re.compile(
    r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) (WARNING|ERROR|INFO) ssetape\[([^\]]+)\] (.*)$"
)
END = re.compile(r"dropping ended: ([\d,]+) events dropped over")
PACED_S = 20.0  # how long the stream keeps coming while the recording process is stopped


@contextmanager
def paced_upstream(burst: list[bytes], trickle: list[bytes], every: float) -> Iterator[str]:
    """An SSE stream: ``burst`` at once (more than the proxy holds), then one chunk of
    ``trickle`` every ``every`` seconds, so that the proxy keeps dropping for a while."""

    def serve(conn: socket.socket) -> None:
        with conn:
            if read_request(conn, b"") is None:
                return
            try:
                conn.sendall(HEAD + b"\r\ntransfer-encoding: chunked\r\n\r\n")
                for i, data in enumerate([*burst, *trickle]):
                    if i >= len(burst):
                        time.sleep(every)
                    conn.sendall(b"%x\r\n%s\r\n" % (len(data), data))
                conn.sendall(b"0\r\n\r\n")
            except OSError:
                return

    with serving(serve) as url:
        yield url


def lines(proc: Proc) -> list[tuple[dt.datetime, str, str, str]]:
    """The log lines of ``proc`` (date, level, name, message); its other output left out."""
    got = []
    for raw in proc.log.decode().splitlines():
        m = LINE.match(raw)
        if m:
            when = dt.datetime.fromisoformat(m.group(1).replace("Z", "+00:00"))
            got.append((when, m.group(2), m.group(3), m.group(4)))
    return got


def last_run(db: str) -> dict[str, object]:
    with Store.open(db, create=False) as store:
        runs = Runs(store).totals()["runs"]
    return dict(runs[-1]) if runs else {}


def test_drops_and_a_stall_are_logged_start_and_end_and_stats_shows_stalled(
    recorders: Recorders, tmp_path: Path
) -> None:
    db = str(tmp_path / "tape.db")
    events = sse_events(25_000)  # 100 events (~20 KB) to a chunk
    burst, trickle = events[:150], events[150:]  # 3 MB, then 100 chunks over PACED_S
    with paced_upstream(burst, trickle, PACED_S / len(trickle)) as upstream:
        proc = recorders.start(
            db, "--mode", f"reverse:{upstream}", "--name", "edge-1",
            "--set", "ssetape_max_pending=1000",
        )  # fmt: skip
        child = recording_process(proc)
        # Its run row names it once the proxy listens (its next save, in 2 s).
        wait_for(lambda: last_run(db).get("name") == "edge-1", 10)
        got: list[int] = []
        client = threading.Thread(target=lambda: got.append(received(proc.url)[0]))
        os.kill(child, signal.SIGSTOP)
        try:
            client.start()
            wait_for(lambda: "recording fell behind: dropping events" in proc.log.decode(), 10)
            # Frozen: no heartbeat in its run row, no report to the proxy, for STALL_AFTER.
            wait_for(lambda: last_run(db)["status"] == "stalled", STALL_AFTER + 20, every=0.5)
            wait_for(lambda: "recording process stalled" in proc.log.decode(), 10)
            table = subprocess.run(
                [SSETAPE, "stats", "--runs", "--db", db], capture_output=True, check=True
            ).stdout.decode()
            assert re.search(r"edge-1\s+stalled", table), table
            client.join(PACED_S + 30)
            assert got == [25_000]  # the traffic is never slowed, nor cut
        finally:
            os.kill(child, signal.SIGCONT)
        wait_for(lambda: last_run(db)["status"] == "running", 20, every=0.5)
        wait_for(lambda: END.search(proc.log.decode()), 30)
        wait_for(lambda: "recording process resumed" in proc.log.decode(), 10)
        assert proc.stop() == 0, proc.log.decode()
    log = proc.log.decode()
    m = EXIT.search(log)
    assert m, log
    lost = int(m.group(3))
    assert lost > 10_000, log
    # Every event the ledger counts lost is in the end lines of the drop episodes.
    assert sum(int(n.replace(",", "")) for n in END.findall(log)) == lost, log
    ours = [(t, msg) for t, level, name, msg in lines(proc) if "ssetape: " in msg]
    assert ours and all(name == "edge-1" for _, _, name, _ in lines(proc)), log
    # Rate-limited: while it keeps dropping, a line every 10 s at most.
    still = [t for t, msg in ours if "recording still behind" in msg]
    assert 1 <= len(still) <= PACED_S / 10 + 2, log
    assert all((b - a).total_seconds() > 9 for a, b in itertools.pairwise(still)), log
    order = [msg for _, msg in ours]
    first = next(i for i, s in enumerate(order) if "fell behind" in s)
    stall = next(i for i, s in enumerate(order) if "recording process stalled" in s)
    resumed = next(i for i, s in enumerate(order) if "recording process resumed" in s)
    assert first < stall < resumed, log
    assert re.search(r"resumed: stalled for \d+ s", log), log


def test_json_log_lines_carry_the_fields_and_the_counts(
    recorders: Recorders, tmp_path: Path
) -> None:
    db = str(tmp_path / "tape.db")
    with paced_upstream(sse_events(20_000), [], 0) as upstream:
        proc = recorders.start(
            db, "--mode", f"reverse:{upstream}", "--name", "j-1", "--log-format", "json",
            "--set", "ssetape_max_pending=1000",
        )  # fmt: skip
        child = recording_process(proc)
        os.kill(child, signal.SIGSTOP)
        try:
            assert received(proc.url)[0] == 20_000
            wait_for(lambda: b'"drop_start"' in proc.log, 10)
        finally:
            os.kill(child, signal.SIGCONT)
        wait_for(lambda: b'"drop_end"' in proc.log, 30)
        assert proc.stop() == 0, proc.log.decode()
    objs = [orjson.loads(raw) for raw in proc.log.splitlines() if raw.startswith(b"{")]
    assert objs, proc.log.decode()
    for obj in objs:
        assert {"ts", "level", "name", "logger", "msg"} <= obj.keys(), obj
        assert obj["name"] == "j-1" and obj["ts"].endswith("Z")
        dt.datetime.fromisoformat(obj["ts"].replace("Z", "+00:00"))
    start = next(o for o in objs if o.get("event") == "drop_start")
    assert start["level"] == "WARNING" and start["logger"] == "ssetape.recorder"
    assert start["events_dropped"] > 0 and "fell behind" in start["msg"]
    ends = [o for o in objs if o.get("event") == "drop_end"]
    exit_line = next(EXIT.search(o["msg"]) for o in objs if EXIT.search(o["msg"]))
    assert exit_line is not None
    assert sum(o["events_dropped"] for o in ends) == int(exit_line.group(3)) > 0
    assert ends[-1]["events_lost"] == int(exit_line.group(3))
