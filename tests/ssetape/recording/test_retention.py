"""Retention on a schedule (``ssetape_retain``): the recording process's own thread prunes its
store, on real SQLite files and (with SSETAPE_TEST_PG_URL) PostgreSQL schemas."""

from __future__ import annotations

import datetime as dt
import logging
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ssetape.recording.protocol import RetentionPolicy, WorkerConfig
from ssetape.recording.retention import Retention
from ssetape.recording.worker import RecordWorker
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from ssetape.storage.writer import Writer
from tests.addons.stores import pg_schema, wait_for

DAY = 86_400.0
EVENTS = 3  # per exchange


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A migrated store's target: an SQLite file, or a fresh PostgreSQL schema (skipped
    without SSETAPE_TEST_PG_URL)."""
    if request.param == "sqlite":
        target = str(tmp_path / "tape.db")
        Store.open(target).close()
        yield target
        return
    with pg_schema() as url:
        Store.open(url).close()
        yield url


def fill(store: Store, exchanges: dict[str, float], *, open_: frozenset[str] = frozenset()) -> None:
    """One streamed exchange per uid, started that many days ago, with its events and
    chunks; those in ``open_`` still recording (begun, never finished)."""
    now = dt.datetime.now(dt.UTC)
    w = Writer(store)
    w.start()
    try:
        for uid, days in exchanges.items():
            w.begin(
                uid,
                started_at=now - dt.timedelta(days=days),
                method="POST",
                scheme="https",
                host="api.openai.com",
                port=443,
                path="/v1/chat/completions",
                query="",
                http_version="HTTP/1.1",
                request_headers=[],
                request_body=b"{}",
                fingerprint="ab" * 32,
                is_stream=True,
                recorder="test:1:0",
            )
            rows = [
                (i, i * 1000, None, str(i), None, f"data: {i}\n\n".encode()) for i in range(EVENTS)
            ]
            w.add_events(uid, rows)
            w.add_chunks(uid, [(0, 0, b"".join(r[5] for r in rows))])
            if uid not in open_:
                w.finish(uid, state="completed", status=200, duration_us=5000)
        assert w.flush()
    finally:
        w.close()


def kept(store: Store) -> dict[str, int]:
    """Each exchange left, with how many events it still has."""
    return {x.uid: len(list(Queries(store).events(x.id))) for x in Queries(store).exchanges()}


def test_the_thread_prunes_the_old_keeps_the_new_and_runs_again_until_closed(
    db: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "ssetape.retention")
    with Store.open(db, create=False) as store:
        fill(
            store,
            {"old1": 40, "old2": 35, "going": 40, "middle": 10, "new": 0.01},
            open_=frozenset({"going"}),
        )
        policy = RetentionPolicy(exchanges=30 * DAY, events=7 * DAY, every=0.3)
        retention = Retention(store, policy, batch_rows=2)  # several batches per run
        retention.start()
        try:
            # Within a wide margin: the first run is due after 0.3 s.
            wait_for(lambda: kept(store) == {"going": EVENTS, "middle": 0, "new": EVENTS})
            middle = Queries(store).exchange("middle")
            assert middle is not None and middle.events_pruned_at is not None
            assert middle.state == "completed"  # its summary row stays
            # It runs again: an old exchange that appears later goes too.
            fill(store, {"late": 50})
            wait_for(lambda: "late" not in kept(store))
            assert retention.failures == 0
        finally:
            started = time.monotonic()
            retention.close()
            assert time.monotonic() - started < 2  # an Event wait, not a sleep
        runs = retention.runs
        time.sleep(0.7)
        assert retention.runs == runs  # stopped
        # The exchange still recording was never touched, however old.
        assert kept(store)["going"] == EVENTS
    lines = [r.getMessage() for r in caplog.records if "retention" in r.getMessage()]
    assert any("pruned 2 exchange(s)" in line for line in lines), lines
    assert any("pruned the events of 1 exchange(s)" in line for line in lines), lines
    assert any("1 still recording, kept" in line for line in lines), lines
    # A run that removes nothing says nothing: one line per prune that did something.
    assert len(lines) == 3, lines
    assert all(r.levelno == logging.INFO for r in caplog.records if "retention" in r.getMessage())


def test_close_ends_the_wait_at_once(tmp_path: Path) -> None:
    with Store.open(str(tmp_path / "tape.db")) as store:
        retention = Retention(store, RetentionPolicy(exchanges=DAY, every=3600))
        retention.start()
        started = time.monotonic()
        retention.close()
        assert time.monotonic() - started < 0.5
        assert retention.runs == 0


def test_a_failed_run_is_one_warning_and_the_next_run_prunes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "tape.db"
    Store.open(str(path)).close()
    # A short lock wait: the store locked by someone else fails the run quickly.
    with Store.open(str(path), create=False, deadline=0.2) as store:
        fill(store, {"old": 40})
        retention = Retention(store, RetentionPolicy(exchanges=DAY, every=3600))
        caplog.set_level(logging.INFO, "ssetape.retention")
        other = sqlite3.connect(path, isolation_level=None)
        try:
            other.execute("BEGIN EXCLUSIVE")
            assert retention.prune_now() == []
            other.execute("ROLLBACK")
        finally:
            other.close()
        [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert "retention: cannot prune" in warning.getMessage()
        assert "\n" not in warning.getMessage()
        assert (retention.runs, retention.failures) == (1, 1)
        [report] = retention.prune_now()
        assert report.exchanges == 1 and kept(store) == {}


def test_the_recording_process_prunes_its_store_while_it_records(tmp_path: Path) -> None:
    db = str(tmp_path / "tape.db")
    with Store.open(db) as store:
        fill(store, {"old": 40, "new": 0})
    policy = RetentionPolicy(exchanges=30 * DAY, every=0.2)
    worker = RecordWorker(WorkerConfig(db=db, max_pending=1000, active=True, retention=policy))
    worker.start()
    try:
        assert worker.retention is not None
        wait_for(lambda: worker.retention is not None and worker.retention.runs > 0)
    finally:
        started = time.monotonic()
        worker.stop()
        assert time.monotonic() - started < 5
    with Store.open(db, create=False) as store:
        assert kept(store) == {"new": EVENTS}


def test_without_a_policy_the_recording_process_prunes_nothing(tmp_path: Path) -> None:
    db = str(tmp_path / "tape.db")
    Store.open(db).close()
    worker = RecordWorker(WorkerConfig(db=db, max_pending=1000, active=True))
    assert worker.retention is None
    worker.start()
    worker.stop()
