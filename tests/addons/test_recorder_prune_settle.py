"""A recording process dies, the store is pruned, the recorder stops: the counts stay true.

The proxy settles a dead recording process's counts at its stop. What a prune (or
``ssetape_retain``) removed in between was stored all the same: the exit line must not call
it lost, and ``ssetape stats --runs`` must keep the dead run's stored count.
"""

from __future__ import annotations

import datetime as dt
import gc
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from ssetape.recording.worker import REPORT_EVERY
from ssetape.simulator.simulator import Simulator
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from tests.addons.stores import Recorders, recording_process, store_target, wait_for
from tests.addons.test_recorder_failopen import Reader
from tests.addons.test_recorder_failopen import body as plain_body
from tests.conftest import SSETAPE

EXIT = re.compile(
    r"ssetape: (\d+) events? in (\d+) exchanges? stored, (\d+) events? and (\d+) exchanges? lost"
)


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with store_target(request.param, tmp_path) as target:
        yield target


def cli(*args: str) -> bytes:
    return subprocess.run([SSETAPE, *args], capture_output=True, check=True).stdout


def stored_by_recorder(db: str) -> dict[str, int]:
    """Event rows in the store now, per recorder id."""
    with Store.open(db, create=False) as store:
        got: dict[str, int] = {}
        for x in Queries(store).exchanges():
            assert x.recorder is not None
            got[x.recorder] = got.get(x.recorder, 0) + x.event_count
        return got


def test_a_prune_after_a_recording_process_died_changes_no_count(
    sim: Simulator, recorders: Recorders, db: str
) -> None:
    def body(i: int, tokens: int) -> dict[str, Any]:
        return {**plain_body(i, tokens), "model": "sim-chat"}  # events split across chunks

    proc = recorders.start(db, "--mode", f"reverse:{sim.url}")
    before = Reader(proc.url, body(0, 50))
    before.run()
    time.sleep(REPORT_EVERY + 0.3)
    first = recording_process(proc)
    readers = [Reader(proc.url, body(i, 300)) for i in range(1, 7)]
    gc.collect()
    gc.disable()  # the clients' pauses are not what this test is about
    try:
        for r in readers:
            r.start()
        time.sleep(0.6)  # mid-burst: every stream has events stored and events to come
        os.kill(first, signal.SIGKILL)
        for r in readers:
            r.join(60)
    finally:
        gc.enable()
    after = Reader(proc.url, body(9, 50))
    after.run()
    assert recording_process(proc) != first
    received = sum(len(r.arrivals) for r in [before, *readers, after])

    # What the store holds before the prune, once the new recording process has stored
    # `after` and marked the dead one's exchanges interrupted (they are prunable then).
    def quiet() -> dict[str, int] | None:
        with Store.open(db, create=False) as store:
            if any(x.state == "recording" for x in Queries(store).exchanges()):
                return None
        return stored_by_recorder(db)

    wait_for(quiet, timeout=30)
    time.sleep(1.0)
    stored = stored_by_recorder(db)
    dead = {r: n for r, n in stored.items() if r.split(":")[1] == str(first)}
    assert len(dead) == 1 and next(iter(dead.values())) > 0, stored
    [(dead_id, dead_stored)] = dead.items()
    assert dead_stored < sum(len(r.arrivals) for r in [before, *readers])  # it lost some

    cut = (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%S")
    cli("prune", "--db", db, "--older-than", cut)
    assert stored_by_recorder(db) == {}  # everything went

    assert proc.stop() == 0, proc.log.decode()
    log = proc.log.decode()
    m = EXIT.search(log)
    assert m, log
    stored_n, exchanges, lost, _ = map(int, m.groups())
    # What was stored stays stored, and only what never reached the store is lost.
    assert stored_n == sum(stored.values()), (log, stored)
    assert stored_n + lost == received, (log, stored, received)
    assert exchanges == 2  # `before` and `after`; the six in flight are lost
    runs = orjson.loads(cli("stats", "--runs", "--json", "--db", db))
    by_id = {r["recorder"]: r for r in runs["runs"]}
    assert by_id[dead_id]["events_recorded"] == dead_stored
    assert (runs["events_recorded"], runs["events_lost"]) == (stored_n, lost)
