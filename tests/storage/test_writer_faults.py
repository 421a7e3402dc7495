"""The writer under real store faults: every row ends stored or counted, the writer never
blocks for good, and it records again once the store is usable, without a restart.

Faults: a PostgreSQL that stops answering behind a network path that hangs (a TCP relay the
test freezes), a table locked past the deadline, text PostgreSQL cannot hold (NUL), an SQLite
file deleted under the writer, and one made immutable for a while (``chattr +i``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from ssetape.records import EventRow
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from ssetape.storage.store_file import LOST_WITH_FILE
from ssetape.storage.writer import Writer
from tests.addons.stores import pg_schema
from tests.relay import Relay
from tests.storage.test_writer import stored, uid

Fields = Callable[..., dict[str, Any]]
Rows = Callable[..., list[EventRow]]
DEADLINE = 0.5


@pytest.fixture
def relayed_pg() -> Iterator[tuple[str, Relay]]:
    """A PostgreSQL URL whose connections go through a relay the test can freeze."""
    with pg_schema() as url:
        Store.open(url).close()  # migrated directly: the relay is for the writer
        parts = make_url(url)
        relay = Relay((parts.host or "127.0.0.1", parts.port or 5432))
        try:
            yield parts.set(host="127.0.0.1", port=relay.port).render_as_string(False), relay
        finally:
            relay.close()


def writer_for(url: str, **kwargs: Any) -> tuple[Store, Writer]:
    """As the recording process does: the store migrated first, then opened with a deadline."""
    Store.open(url).close()
    store = Store.open(url, migrate=False, deadline=DEADLINE)
    writer = Writer(store, deadline=DEADLINE, **kwargs)
    writer.start()
    return store, writer


def count(url: str) -> int:
    with Store.open(url, create=False) as store:
        return sum(x.event_count for x in Queries(store).exchanges())


def test_a_silent_network_is_cut_and_retried_then_everything_is_stored(
    relayed_pg: tuple[str, Relay],
    exchange_fields: Fields,
    event_rows: Rows,
    caplog: pytest.LogCaptureFixture,
) -> None:
    url, relay = relayed_pg
    caplog.set_level(logging.INFO, logger="ssetape.storage")
    store, writer = writer_for(url)
    writer.begin(uid(1), **exchange_fields())
    writer.add_events(uid(1), event_rows(0, 10))
    assert writer.flush()
    with relay.frozen():
        writer.add_events(uid(1), event_rows(10, 10))
        time.sleep(2.5)  # the write hangs in the network, past its deadline (+1 s)
        assert writer.stats.failed_batches >= 1
    writer.finish(uid(1), state="completed")
    assert writer.flush(timeout=15)
    writer.close()
    store.close()
    assert stored(Store.open(url, create=False)) == {uid(1): list(range(20))}
    lines = [r.getMessage() for r in caplog.records]
    assert sum("no answer from the database" in m for m in lines) >= 1, lines
    assert sum("cannot write to" in m for m in lines) == 1, lines
    assert writer.stats.dropped_events == 0


def test_closing_while_the_database_never_answers_counts_every_row(
    relayed_pg: tuple[str, Relay], exchange_fields: Fields, event_rows: Rows
) -> None:
    url, relay = relayed_pg
    store, writer = writer_for(url)
    writer.begin(uid(1), **exchange_fields())
    writer.add_events(uid(1), event_rows(0, 10))
    assert writer.flush()
    with relay.frozen():
        writer.add_events(uid(1), event_rows(10, 25))
        writer.finish(uid(1), state="completed")
        t0 = time.monotonic()
        writer.close(timeout=1.0)
        assert time.monotonic() - t0 < 3.0  # never blocked for good
    stats = writer.stats
    assert (stats.events, stats.dropped_events) == (10, 25)
    assert count(url) == stats.events  # what it says is stored is in the store
    store.close()


def test_a_table_locked_past_the_deadline_is_an_outage_like_any_other(
    exchange_fields: Fields, event_rows: Rows, caplog: pytest.LogCaptureFixture
) -> None:
    with pg_schema() as url:
        caplog.set_level(logging.INFO, logger="ssetape.storage")
        store, writer = writer_for(url)
        writer.begin(uid(1), **exchange_fields())
        assert writer.flush()
        admin = create_engine(url)
        with admin.connect() as conn:
            conn.execute(text("LOCK TABLE events IN ACCESS EXCLUSIVE MODE"))
            writer.add_events(uid(1), event_rows(0, 30))
            time.sleep(4 * DEADLINE)
            assert writer.stats.failed_batches >= 2 and writer.stats.events == 0
            conn.commit()
        writer.finish(uid(1), state="completed")
        assert writer.flush(timeout=10)
        writer.close()
        admin.dispose()
        assert "lock timeout" in (writer.stats.last_error or "")
        assert stored(store) == {uid(1): list(range(30))}
        messages = [r.getMessage() for r in caplog.records]
        assert sum("cannot write to" in m for m in messages) == 1
        store.close()


def test_nul_in_text_is_stored_per_event_on_postgresql(
    exchange_fields: Fields, event_rows: Rows
) -> None:
    with pg_schema() as url:
        store, writer = writer_for(url)
        rows = event_rows(0, 21)
        nul = b'data: {"t":"a\x00b"}\n\n'
        rows[7] = (7, 7000, "mess\x00age", nul[6:-2].decode(), "i\x00d", nul)
        writer.begin(uid(1), **exchange_fields(), error="boom\x00")
        writer.add_events(uid(1), rows)
        writer.finish(uid(1), state="completed")
        assert writer.flush()
        writer.close()
        events = list(Queries(store).events(Queries(store).exchanges()[0].id))
        assert [e.seq for e in events] == list(range(21))  # no neighbour lost
        assert events[7].raw == nul  # the exact bytes, for replay and export
        assert events[7].data == '{"t":"a\ufffdb"}' and events[7].event == "mess\ufffdage"
        assert writer.stats.dropped_events == 0
        store.close()


def test_a_deleted_store_file_is_detected_counted_and_started_afresh(
    tmp_path: Path, exchange_fields: Fields, event_rows: Rows, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "tape.db"
    caplog.set_level(logging.INFO, logger="ssetape.storage")
    store, writer = writer_for(str(db))  # migrates the fresh file first
    writer.begin(uid(1), **exchange_fields())
    writer.add_events(uid(1), event_rows(0, 10))
    writer.finish(uid(1), state="completed")
    writer.begin(uid(2), **exchange_fields())
    writer.add_events(uid(2), event_rows(0, 5))
    assert writer.flush()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    writer.add_events(uid(2), event_rows(5, 5))
    writer.finish(uid(2), state="completed")
    writer.begin(uid(3), **exchange_fields())
    writer.add_events(uid(3), event_rows(0, 4))
    writer.finish(uid(3), state="completed")
    assert writer.flush()
    writer.close()
    store.close()
    stats = writer.stats
    assert db.exists()
    with Store.open(str(db), create=False) as fresh:
        assert stored(fresh) == {uid(2): list(range(5, 10)), uid(3): [0, 1, 2, 3]}
        two = Queries(fresh).exchange(uid(2))
        assert two is not None and two.gap_seq == 0 and LOST_WITH_FILE in (two.error or "")
        three = Queries(fresh).exchange(uid(3))
        assert three is not None and (three.gap_seq, three.error) == (None, None)
    # Stored is what the file holds; lost is what went with the old one; together, all.
    assert (stats.events, stats.dropped_events) == (9, 15)
    assert (stats.exchanges, stats.dropped_exchanges) == (2, 1)
    lines = [r.getMessage() for r in caplog.records if "was deleted" in r.getMessage()]
    assert len(lines) == 1 and "15 events and 1 exchanges went with it" in lines[0]


@contextlib.contextmanager
def immutable(*paths: Path) -> Iterator[None]:
    if shutil.which("chattr") is None:
        pytest.skip("chattr is not installed")
    done = subprocess.run(["chattr", "+i", *map(str, paths)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"chattr +i is not allowed here: {done.stderr.decode().strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", *map(str, paths)], check=True)


def test_a_store_made_read_only_for_a_while_is_written_again_afterwards(
    tmp_path: Path, exchange_fields: Fields, event_rows: Rows, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "tape.db"
    caplog.set_level(logging.INFO, logger="ssetape.storage")
    store, writer = writer_for(str(db))  # migrates the fresh file first
    writer.begin(uid(1), **exchange_fields())
    writer.add_events(uid(1), event_rows(0, 10))
    assert writer.flush()
    files = [p for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm")) if p.exists()]
    with immutable(*files):
        writer.add_events(uid(1), event_rows(10, 10))
        time.sleep(1.0)
        assert writer.stats.failed_batches >= 1
    writer.finish(uid(1), state="completed")
    assert writer.flush(timeout=10)
    writer.close()
    store.close()
    assert stored(Store.open(str(db), create=False)) == {uid(1): list(range(20))}
    assert writer.stats.dropped_events == 0
    assert os.path.exists(db)
    messages = [r.getMessage() for r in caplog.records]
    assert sum("cannot write to" in m for m in messages) == 1, messages
