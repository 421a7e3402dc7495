"""The recording process of a real `ssetape record` (it parses and stores; the proxy relays).

It dies mid-stream: the clients still get every byte on time, the proxy says so in one line,
counts the exchanges in flight as lost and starts a new recording process that records the
next exchange whole. Ctrl-C reaches both processes: the proxy still decides when recording
ends, so nothing is lost.
"""

from __future__ import annotations

import gc
import os
import re
import signal
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from ssetape.recording.worker import REPORT_EVERY
from ssetape.simulator.simulator import Simulator
from ssetape.storage.queries import Queries
from ssetape.storage.runs import INTERRUPTED, Runs
from ssetape.storage.store import Store
from tests.addons.stores import Recorders, recording_process, wait_for
from tests.addons.test_recorder_failopen import Reader
from tests.addons.test_recorder_failopen import body as plain_body


# sim-plain sends whole events; sim-chat splits them across chunks (mid-line, inside a UTF-8
# character) and glues two into one, as real upstreams do: the losses must still add up.
@pytest.mark.parametrize("model", ["sim-plain", "sim-chat"])
def test_recording_process_killed_mid_stream(
    sim: Simulator, recorders: Recorders, tmp_path: Path, model: str
) -> None:
    def body(i: int, tokens: int) -> dict[str, Any]:
        return {**plain_body(i, tokens), "model": model}

    db = str(tmp_path / "tape.db")
    proc = recorders.start(db, "--mode", f"reverse:{sim.url}")
    before = Reader(proc.url, body(0, 20))
    before.run()
    time.sleep(REPORT_EVERY + 0.3)  # the first process reports having stored it
    first = recording_process(proc)
    readers = [Reader(proc.url, body(i, 200)) for i in range(1, 4)]
    gc.collect()
    gc.disable()  # see test_recorder_failopen: the clients' pauses are not the proxy's
    try:
        for r in readers:
            r.start()
        time.sleep(0.4)
        since = time.perf_counter()
        os.kill(first, signal.SIGKILL)
        for r in readers:
            r.join(60)
    finally:
        gc.enable()
    after = Reader(proc.url, body(9, 20))
    after.run()
    second = recording_process(proc)
    assert second != first
    assert proc.stop() == 0, proc.log.decode()
    log = proc.log.decode()

    for r in (before, after):
        r.check()
    for r in readers:
        r.check(since)  # every byte, on time, while the recording process was gone

    assert len(re.findall(r"recording process ended unexpectedly .*-9.* 3 exchange", log)) == 1
    assert "Traceback" not in log, log
    # `before` was stored by the first recording process, `after` by the second.
    assert re.search(r" in 2 exchanges stored, .*3 exchanges lost.*restarted 1 time", log), log
    m = re.search(r"ssetape: (\d+) events? in .* stored, (\d+) events? and", log)
    assert m, log
    stored_n, lost = int(m.group(1)), int(m.group(2))
    received = sum(len(r.arrivals) for r in [before, *readers, after])
    with Store.open(db, create=False) as store:
        # Exact, though the first process died between two of its reports: what the store
        # holds is what the exit line and the run rows say, and the rest is counted lost.
        assert stored_n == sum(x.event_count for x in Queries(store).exchanges())
        assert stored_n + lost == received
        runs = Runs(store).all()
        assert len(runs) == 2
        assert (sum(r.events_recorded for r in runs), sum(r.events_lost for r in runs)) == (
            stored_n,
            lost,
        )
        rows = {x.request_body: x for x in Queries(store).exchanges()}
        for r in (before, after):
            x = rows[orjson.dumps(r.b)]
            assert x.state == "completed"
            assert b"".join(e.raw for e in Queries(store).events(x.id)) == r.body
        # The dead process's exchanges: what it stored stays, and they are closed as
        # interrupted by the next process's sweep (their recorder is gone).
        for r in readers:
            x = rows[orjson.dumps(r.b)]
            assert (x.state, x.error) == ("interrupted", INTERRUPTED)
            assert r.body.startswith(b"".join(e.raw for e in Queries(store).events(x.id)))


def test_ctrl_c_reaches_the_recording_process_too(
    sim: Simulator, recorders: Recorders, tmp_path: Path
) -> None:
    """A terminal's Ctrl-C signals the whole process group; the recording process leaves
    the decision to the proxy and stores everything first."""
    db = str(tmp_path / "tape.db")
    proc = recorders.start(db, "--mode", f"reverse:{sim.url}")
    readers = [Reader(proc.url, plain_body(i, 30)) for i in range(3)]
    for r in readers:
        r.run()
    child = recording_process(proc)
    os.kill(child, signal.SIGINT)
    proc.proc.send_signal(signal.SIGINT)
    assert proc.proc.wait(30) == 0, proc.log.decode()
    wait_for(lambda: not Path(f"/proc/{child}").exists() or _zombie(child))
    n = sum(len(r.arrivals) for r in readers)
    assert f"{n} events in 3 exchanges stored, none lost" in proc.log.decode()
    with Store.open(db, create=False) as store:
        assert {x.state for x in Queries(store).exchanges()} == {"completed"}
        assert sum(x.event_count for x in Queries(store).exchanges()) == n


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except OSError:
        return True
