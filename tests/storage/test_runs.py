"""Recorder runs: the counters row, the totals for `ssetape stats`, and who counts as gone."""

from __future__ import annotations

import datetime as dt
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import event

from ssetape.storage.models import Exchange
from ssetape.storage.queries import Queries
from ssetape.storage.runs import (
    INTERRUPTED,
    STALE_AFTER,
    RunCounts,
    RunReporter,
    Runs,
    recorder_gone,
)
from ssetape.storage.store import Store
from ssetape.storage.writer import Writer

HOST = socket.gethostname()


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def me() -> str:
    return f"{HOST}:{os.getpid()}:{int(time.time())}"


def test_save_is_an_upsert_and_totals_sum_every_run(store: Store) -> None:
    now = dt.datetime.now(dt.UTC)
    runs = Runs(store)
    runs.save("a:1:1", now, RunCounts(events_recorded=5))
    runs.save("a:1:1", now, RunCounts(events_recorded=9, events_lost=2, store_errors=1,
                                      last_error="OperationalError: disk full"))  # fmt: skip
    runs.save("b:2:2", now, RunCounts(exchanges_recorded=1, exchanges_lost=3), stopped_at=now)
    run = runs.get("a:1:1")
    assert run is not None
    assert (run.events_recorded, run.events_lost, run.last_error) == (
        9,
        2,
        "OperationalError: disk full",
    )
    assert run.started_at == now and run.stopped_at is None
    totals = runs.totals()
    assert {k: totals[k] for k in ("events_lost", "exchanges_lost", "store_errors")} == {
        "events_lost": 2,
        "exchanges_lost": 3,
        "store_errors": 1,
    }
    assert totals["events_recorded"] == 9 and totals["exchanges_recorded"] == 1
    assert [(r["recorder"], r["status"]) for r in totals["runs"]] == [
        ("a:1:1", "running"),  # another host, fresh heartbeat
        ("b:2:2", "stopped"),
    ]


def test_empty_store_has_no_runs(store: Store) -> None:
    assert Runs(store).totals() == {
        "exchanges_recorded": 0,
        "events_recorded": 0,
        "exchanges_lost": 0,
        "events_lost": 0,
        "store_errors": 0,
        "runs": [],
    }


def test_who_is_gone() -> None:
    def gone(recorder: str, updated_at: dt.datetime | None, stopped: bool = False) -> bool:
        return recorder_gone(recorder, updated_at, hostname=HOST, stopped=stopped)

    fresh = dt.datetime.now(dt.UTC)
    stale = fresh - dt.timedelta(seconds=STALE_AFTER + 1)
    # This host: the pid decides, whatever the heartbeat says.
    assert not gone(me(), stale)
    assert gone(f"{HOST}:{dead_pid()}:{int(time.time())}", fresh)
    # A live pid that started after the id was made is another process (pid reused).
    assert gone(f"{HOST}:{os.getpid()}:{int(time.time()) - 86_400}", fresh)
    # Another host: the heartbeat decides; without one, nobody can tell.
    assert not gone("elsewhere:1:1", fresh)
    assert gone("elsewhere:1:1", stale)
    assert not gone("elsewhere:1:1", None)
    assert not gone("not-an-id", None)
    assert gone("elsewhere:1:1", fresh, stopped=True)


def test_mark_gone_interrupted_touches_only_gone_recorders(
    store: Store, exchange_fields: Callable[..., dict[str, Any]]
) -> None:
    dead = f"{HOST}:{dead_pid()}:{int(time.time())}"
    live_here, live_there, stale_there = me(), "elsewhere:7:1", "elsewhere:8:1"
    runs = Runs(store)
    now = dt.datetime.now(dt.UTC)
    runs.save(live_there, now, RunCounts())
    old = now - dt.timedelta(seconds=STALE_AFTER + 5)
    runs.save(stale_there, old, RunCounts(), now=old)
    rows = {
        "dead": exchange_fields(recorder=dead),
        "dead-done": exchange_fields(recorder=dead, state="completed"),
        "dead-err": exchange_fields(recorder=dead, error="capture failed: boom"),
        "live-here": exchange_fields(recorder=live_here),
        "live-there": exchange_fields(recorder=live_there),
        "stale-there": exchange_fields(recorder=stale_there),
        "unknown-there": exchange_fields(recorder="nowhere:9:1"),
    }
    with store.Session.begin() as s:
        for name, fields in rows.items():
            s.add(Exchange(uid=name.ljust(32, "x"), **fields))
    assert runs.mark_gone_interrupted(alive=[live_here]) == 3
    got = {x.uid.rstrip("x"): (x.state, x.error) for x in Queries(store).exchanges()}
    assert got == {
        "dead": ("interrupted", INTERRUPTED),
        "dead-done": ("completed", None),
        "dead-err": ("interrupted", "capture failed: boom"),
        "live-here": ("recording", None),
        "live-there": ("recording", None),
        "stale-there": ("interrupted", INTERRUPTED),
        "unknown-there": ("recording", None),
    }
    assert runs.mark_gone_interrupted(alive=[live_here]) == 0


def test_reporter_keeps_the_row_current_and_stops_it(
    store: Store, exchange_fields: Callable[..., dict[str, Any]], event_rows: Callable[..., Any]
) -> None:
    rid = me()

    def counts() -> RunCounts:  # late on purpose: the commits themselves count what is stored
        return RunCounts(exchanges_recorded=0, events_recorded=0, events_lost=2)

    reporter = RunReporter(Runs(store), rid, counts, interval=0.05)
    writer = Writer(store, on_commit=reporter.stored)
    writer.start()
    reporter.start()
    writer.begin("u" * 32, **exchange_fields(recorder=rid))
    writer.add_events("u" * 32, event_rows(0, 7))
    assert writer.flush()
    # Exact as soon as the rows are committed: written in their own transaction.
    run = Runs(store).get(rid)
    assert run is not None and (run.exchanges_recorded, run.events_recorded) == (1, 7)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        run = Runs(store).get(rid)
        if run is not None and run.events_lost == 2:
            break
        time.sleep(0.02)
    # The reporter's late counts never overwrite them.
    assert run is not None and (run.events_lost, run.events_recorded) == (2, 7)
    writer.close()
    assert reporter.stop()
    run = Runs(store).get(rid)
    assert run is not None and run.stopped_at is not None
    assert Runs(store).status(run) == "stopped"


def test_inactive_reporter_never_writes(store: Store) -> None:
    reporter = RunReporter(Runs(store), me(), RunCounts, interval=0.01)
    reporter.start(active=False)
    time.sleep(0.05)
    assert not reporter.stop() and not reporter.active
    assert Runs(store).all() == []


def test_reporter_survives_a_failing_store(tmp_path: Any) -> None:
    """A save that fails is retried at the next tick; stop() says whether the last one worked."""
    store = Store.open(str(tmp_path / "s.db"))
    broken = [True]

    @event.listens_for(store.engine, "before_cursor_execute")
    def fail(*_: Any) -> None:
        if broken[0]:
            raise OSError("disk on fire")

    reporter = RunReporter(Runs(store), me(), RunCounts, interval=0.02)
    reporter.start()
    time.sleep(0.1)
    assert not reporter.saved and reporter.last_failure == "disk on fire"
    broken[0] = False
    time.sleep(0.1)
    assert reporter.saved
    assert reporter.stop()
    assert len(Runs(store).all()) == 1
    store.close()
