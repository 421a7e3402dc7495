"""Where a run stands in `ssetape stats --runs`: running, stalled, stopped or gone, and the
instance it belongs to."""

from __future__ import annotations

import datetime as dt
import os
import socket
import time

from ssetape.storage.runs import STALE_AFTER, STALL_AFTER, RunCounts, Runs
from ssetape.storage.store import Store
from ssetape.vocabulary import RunState

HOST = socket.gethostname()


def test_a_live_recorder_without_a_heartbeat_is_stalled(store: Store) -> None:
    runs = Runs(store)
    now = dt.datetime.now(dt.UTC)
    ago = {s: now - dt.timedelta(seconds=s) for s in (1, STALL_AFTER + 5, STALE_AFTER + 5)}
    here = f"{HOST}:{os.getpid()}:{int(time.time())}"  # this process: alive
    runs.save(here, now, RunCounts(), now=ago[STALL_AFTER + 5], name="api-1")
    runs.save("elsewhere:1:1", now, RunCounts(), now=ago[1])
    runs.save("elsewhere:2:2", now, RunCounts(), now=ago[STALL_AFTER + 5])
    runs.save("elsewhere:3:3", now, RunCounts(), now=ago[STALE_AFTER + 5])
    runs.save("elsewhere:4:4", now, RunCounts(), stopped_at=now, now=ago[STALE_AFTER + 5])
    got = {r["recorder"]: (r["status"], r["name"], r["host"]) for r in runs.totals()["runs"]}
    assert got == {
        here: (RunState.STALLED, "api-1", HOST),
        "elsewhere:1:1": (RunState.RUNNING, None, "elsewhere"),
        "elsewhere:2:2": (RunState.STALLED, None, "elsewhere"),
        "elsewhere:3:3": (RunState.GONE, None, "elsewhere"),
        "elsewhere:4:4": (RunState.STOPPED, None, "elsewhere"),
    }
    # A heartbeat again: running; a save without a name keeps the one it has.
    runs.save(here, now, RunCounts(events_recorded=3))
    run = runs.get(here)
    assert run is not None and (runs.status(run), run.name) == (RunState.RUNNING, "api-1")
