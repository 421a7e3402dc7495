"""One outage, one announcement: failures of different kinds in a row are one episode, every
one still counted; a write that succeeds ends it. A real PostgreSQL store, real failures."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import Connection, create_engine, text
from sqlalchemy.engine import make_url

from ssetape.records import EventRow
from tests.addons.stores import pg_schema
from tests.storage.test_writer import stored, uid
from tests.storage.test_writer_faults import DEADLINE, writer_for

Fields = Callable[..., dict[str, Any]]
Rows = Callable[..., list[EventRow]]


def terminate_others(admin: Connection, url: str, *keep: int) -> int:
    """The server ends every session of this test's schema but ``keep`` and ``admin``."""
    done = admin.execute(
        text(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = :app AND pid <> pg_backend_pid() AND pid <> ALL(:keep)"
        ),
        {"app": make_url(url).query["application_name"], "keep": list(keep)},
    )
    return int(done.scalar_one())


def announcements(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "cannot write to" in r.getMessage()]


def test_a_lock_timeout_then_a_lost_connection_is_one_announcement_two_failures(
    exchange_fields: Fields, event_rows: Rows, caplog: pytest.LogCaptureFixture
) -> None:
    with pg_schema() as url:
        caplog.set_level(logging.INFO, logger="ssetape.storage")
        store, writer = writer_for(url)
        writer.begin(uid(1), **exchange_fields())
        assert writer.flush()
        admin = create_engine(url, isolation_level="AUTOCOMMIT")
        locker = create_engine(url)
        try:
            with locker.connect() as lock, admin.connect() as conn:
                lock.execute(text("LOCK TABLE events IN ACCESS EXCLUSIVE MODE"))
                pid = int(lock.execute(text("SELECT pg_backend_pid()")).scalar_one())
                writer.add_events(uid(1), event_rows(0, 30))
                time.sleep(2 * DEADLINE)  # a lock timeout or more
                first = writer.stats.failed_batches
                assert first >= 1 and "lock timeout" in (writer.stats.last_error or "")
                # The server drops the writer's connection: the next attempt fails otherwise.
                assert terminate_others(conn, url, pid) >= 1
                lock.commit()
            # No write succeeded in between: the lost connection is a failure of its own.
            assert writer.flush(timeout=10)
            assert writer.stats.failed_batches > first
            assert "lock timeout" not in (writer.stats.last_error or "")
        finally:
            writer.close()
            admin.dispose()
            locker.dispose()
        assert stored(store) == {uid(1): list(range(30))}
        [said] = announcements(caplog)
        assert "lock timeout" in said
        messages = [r.getMessage() for r in caplog.records]
        assert sum("again after" in m for m in messages) == 1
        store.close()


def test_a_connection_closed_right_after_a_deadline_cancel_is_the_same_episode(
    exchange_fields: Fields, event_rows: Rows, caplog: pytest.LogCaptureFixture
) -> None:
    """Lock waits cut by statement_timeout (QueryCanceled), a commit on a fresh try, then the
    server closes the writer's connection within the watchdog's deadline: one announcement,
    every failure counted. Anything later is a new outage (see the locked-table test)."""
    with pg_schema() as base:
        parts = make_url(base)
        # No lock_timeout: the lock wait ends at the statement deadline, as a cancel.
        options = f"{parts.query['options']} -clock_timeout=0"
        url = parts.update_query_dict({"options": options}).render_as_string(False)
        caplog.set_level(logging.INFO, logger="ssetape.storage")
        store, writer = writer_for(url)
        writer.begin(uid(1), **exchange_fields())
        assert writer.flush()
        admin = create_engine(url, isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                with create_engine(url).connect() as lock:
                    lock.execute(text("LOCK TABLE events IN ACCESS EXCLUSIVE MODE"))
                    writer.add_events(uid(1), event_rows(0, 10))
                    time.sleep(2 * DEADLINE)
                    assert "statement timeout" in (writer.stats.last_error or "")
                    lock.commit()
                assert writer.flush(timeout=10)
                cancelled = writer.stats.failed_batches
                terminate_others(conn, url)  # right after: well within deadline + 1 s
                writer.add_events(uid(1), event_rows(10, 10))
                assert writer.flush(timeout=10)
            assert writer.stats.failed_batches > cancelled
        finally:
            writer.close()
            admin.dispose()
        assert stored(store) == {uid(1): list(range(20))}
        [said] = announcements(caplog)
        assert "statement timeout" in said
        store.close()
