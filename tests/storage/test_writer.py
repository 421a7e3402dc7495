"""Writer: batching, ordering, timing and behaviour when the database fails."""

from __future__ import annotations

import contextlib
import logging
import random
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import create_engine, event, func, select, text
from sqlalchemy.engine import make_url

from ssetape.records import EventRow
from ssetape.storage.models import Event, Exchange
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from ssetape.storage.writer import Writer

Fields = Callable[..., dict[str, Any]]
Rows = Callable[..., list[EventRow]]


@pytest.fixture
def writer(store: Store) -> Iterator[Writer]:
    w = Writer(store)
    w.start()
    try:
        yield w
    finally:
        w.close()


def uid(i: int) -> str:
    return f"{i:032x}"


def stored(store: Store) -> dict[str, list[int]]:
    """uid -> seqs of its events, in seq order (one query)."""
    out: dict[str, list[int]] = {}
    with store.Session() as s:
        rows = s.execute(
            select(Exchange.uid, Event.seq)
            .join(Event, Event.exchange_id == Exchange.id)
            .order_by(Exchange.uid, Event.seq)
        )
        for u, seq in rows:
            out.setdefault(u, []).append(seq)
    return out


def impatient(store_url: str) -> Store:
    """A store whose lock waits end after ~100 ms, so lock-outs fail fast."""
    if store_url.startswith("sqlite"):
        store = Store.open(store_url)

        @event.listens_for(store.engine, "connect")
        def short_busy_timeout(dbapi_conn: Any, _rec: Any) -> None:
            dbapi_conn.execute("PRAGMA busy_timeout = 100")

        store.engine.dispose()  # drop connections made before the listener
        return store
    # Migrated first with the usual patience: the migration lock is one per database, and
    # other tests' schemas take it too.
    Store.open(store_url).close()
    url = make_url(store_url)
    options = f"{url.query['options']} -clock_timeout=100"
    return Store.open(url.update_query_dict({"options": options}).render_as_string(False))


def test_threads_write_all_events_in_order(
    store: Store, writer: Writer, exchange_fields: Fields, event_rows: Rows
) -> None:
    n_exchanges, per = 20, 500

    def record(indexes: range) -> None:
        rnd = random.Random(indexes.start)
        for i in indexes:
            writer.begin(uid(i), **exchange_fields())
            writer.update(uid(i), status=200, reason="OK", response_headers=[["a", "b"]])
        pos = dict.fromkeys(indexes, 0)
        while pos:
            i = rnd.choice(list(pos))
            n = min(rnd.randint(1, 25), per - pos[i])
            writer.add_events(uid(i), event_rows(pos[i], n, tag=str(i)))
            pos[i] += n
            if pos[i] == per:
                writer.finish(uid(i), state="completed", duration_us=123)
                del pos[i]

    threads = [threading.Thread(target=record, args=(range(k, n_exchanges, 4),)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert writer.flush(timeout=20)

    assert stored(store) == {uid(i): list(range(per)) for i in range(n_exchanges)}
    for ex in Queries(store).exchanges():
        assert (ex.event_count, ex.state, ex.status, ex.duration_us) == (per, "completed", 200, 123)
        events = list(Queries(store).events(ex.id))
        assert [e.offset_us for e in events] == [seq * 1000 for seq in range(per)]
        assert events[7].data == f'{{"tag":"{int(ex.uid, 16)}","seq":7}}'
    stats = writer.stats
    assert (stats.exchanges, stats.events, stats.dropped_events) == (20, 20 * per, 0)
    assert stats.failed_batches == 0 and stats.last_error is None


def test_rows_are_committed_within_the_flush_interval(
    store: Store, writer: Writer, exchange_fields: Fields, event_rows: Rows
) -> None:
    writer.begin(uid(1), **exchange_fields())
    writer.add_events(uid(1), event_rows(0, 3))
    # No flush(): the interval (50 ms) alone must get the rows out. Polled up to 5 s, not
    # slept a fixed time: a loaded CI machine once took longer than 150 ms.
    other = create_engine(store.engine.url)  # a separate pool: a separate connection
    try:
        deadline = time.monotonic() + 5
        while True:
            with other.connect() as conn:
                events = conn.execute(select(func.count()).select_from(Event)).scalar()
                count = conn.execute(select(Exchange.event_count)).scalar()
            if (events, count) == (3, 3) or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        assert (events, count) == (3, 3)
    finally:
        other.dispose()


def test_late_events_after_finish_and_a_new_writer_find_the_exchange(
    store: Store, writer: Writer, exchange_fields: Fields, event_rows: Rows
) -> None:
    writer.begin(uid(1), **exchange_fields())
    writer.add_events(uid(1), event_rows(0, 2))
    writer.finish(uid(1), state="completed")
    writer.add_events(uid(1), event_rows(2, 2))  # after finish: resolved by uid
    assert writer.flush()
    second = Writer(store)
    second.start()
    second.add_events(uid(1), event_rows(4, 1))  # a writer that never saw the begin
    second.update(uid(1), error="late")
    second.add_events(uid(99), event_rows(0, 5))  # never begun anywhere: dropped
    assert second.flush()
    second.close()
    assert stored(store) == {uid(1): [0, 1, 2, 3, 4]}
    ex = Queries(store).exchange(uid(1))
    assert ex is not None and (ex.event_count, ex.error) == (5, "late")
    assert second.stats.dropped_events == 5


def test_lock_out_is_one_episode_then_writes_resume(
    store_url: str,
    exchange_fields: Fields,
    event_rows: Rows,
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = impatient(store_url)
    writer = Writer(store)
    writer.start()
    try:
        writer.begin(uid(1), **exchange_fields())
        writer.add_events(uid(1), event_rows(0, 10))
        assert writer.flush()
        caplog.set_level(logging.INFO, logger="ssetape.storage")
        with locked_out(store, store_url):
            for start in range(10, 60, 10):
                t0 = time.perf_counter()
                writer.add_events(uid(1), event_rows(start, 10))
                assert time.perf_counter() - t0 < 0.08  # callers never wait for the DB
                time.sleep(0.1)
            assert writer.stats.failed_batches >= 2
        writer.finish(uid(1), state="completed")
        assert writer.flush(timeout=10)
    finally:
        writer.close()
    stats = writer.stats
    assert stats.dropped_events == 0 and stats.last_error is not None
    assert stored(store) == {uid(1): list(range(60))}
    ex = Queries(store).exchange(uid(1))
    assert ex is not None and (ex.event_count, ex.state) == (60, "completed")
    lines = [r.getMessage() for r in caplog.records if r.name == "ssetape.storage"]
    assert len([m for m in lines if "cannot write to" in m]) == 1, lines
    assert len([m for m in lines if "writing to" in m and "again" in m]) == 1, lines
    assert not any('"seq"' in m for m in lines)  # no traffic contents in logs
    store.close()


class locked_out:
    """Hold the events table locked from another connection for the block."""

    def __init__(self, store: Store, store_url: str) -> None:
        self.store, self.url = store, store_url

    def __enter__(self) -> None:
        if self.store.is_sqlite:
            self.raw = sqlite3.connect(make_url(self.url).database or "", isolation_level=None)
            self.raw.execute("BEGIN EXCLUSIVE")
        else:
            self.engine = create_engine(self.url)
            self.conn = self.engine.connect()
            self.conn.execute(text("LOCK TABLE events IN ACCESS EXCLUSIVE MODE"))

    def __exit__(self, *exc: object) -> None:
        if self.store.is_sqlite:
            self.raw.execute("COMMIT")
            self.raw.close()
        else:
            self.conn.commit()
            self.conn.close()
            self.engine.dispose()


def test_rejected_ops_cost_only_themselves(
    store: Store,
    writer: Writer,
    exchange_fields: Fields,
    event_rows: Rows,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="ssetape.storage")
    writer.begin(uid(1), **exchange_fields())
    writer.add_events(uid(1), event_rows(0, 10))
    assert writer.flush()
    # One batch with: overlapping seqs (a duplicate key), an exchange missing
    # required columns, an unknown column, and a healthy exchange.
    writer.add_events(uid(1), event_rows(5, 10))
    bad = exchange_fields()
    del bad["method"]
    writer.begin(uid(2), **bad)
    writer.add_events(uid(2), event_rows(0, 4))
    writer.update(uid(1), no_such_column=1)
    writer.begin(uid(3), **exchange_fields())
    writer.add_events(uid(3), event_rows(0, 3))
    writer.finish(uid(3), state="completed")
    assert writer.flush()
    assert stored(store) == {uid(1): list(range(15)), uid(3): [0, 1, 2]}
    one = Queries(store).exchange(uid(1))
    three = Queries(store).exchange(uid(3))
    assert one is not None and one.event_count == 15
    assert three is not None and (three.event_count, three.state) == (3, "completed")
    assert Queries(store).exchange(uid(2)) is None
    stats = writer.stats
    assert stats.dropped_events == 4 and stats.failed_batches >= 1
    rejected = [r for r in caplog.records if "rejected" in r.getMessage()]
    assert len(rejected) == 1
    # Later ops for the rejected exchange are dropped at once, others go on.
    writer.add_events(uid(2), event_rows(4, 2))
    writer.add_events(uid(1), event_rows(15, 1))
    assert writer.flush()
    assert writer.stats.dropped_events == 6
    assert stored(store)[uid(1)] == list(range(16))


def test_pending_rows_are_capped(store: Store, exchange_fields: Fields, event_rows: Rows) -> None:
    writer = Writer(store, max_pending=100)  # not started: nothing drains yet
    writer.begin(uid(1), **exchange_fields())  # counts as one pending row
    for seq in range(120):
        writer.add_events(uid(1), event_rows(seq, 1))
    writer.begin(uid(2), **exchange_fields())  # over the cap: lost, and so are its events
    writer.add_events(uid(2), event_rows(0, 5))
    writer.finish(uid(1), state="completed")  # never capped
    assert writer.stats.dropped_events == 21 + 5
    writer.start()
    assert writer.flush()
    writer.close()
    assert stored(store) == {uid(1): list(range(99))}
    ex = Queries(store).exchange(uid(1))
    assert ex is not None and (ex.state, ex.event_count) == ("completed", 99)


def test_close_gives_up_in_time_when_the_database_stays_locked(
    store_url: str, exchange_fields: Fields, event_rows: Rows
) -> None:
    store = impatient(store_url)
    writer = Writer(store)
    writer.start()
    writer.begin(uid(1), **exchange_fields())
    assert writer.flush()
    with locked_out(store, store_url):
        writer.add_events(uid(1), event_rows(0, 7))
        t0 = time.perf_counter()
        writer.close(timeout=0.5)
        assert time.perf_counter() - t0 < 2.0
    stats = writer.stats
    assert stats.dropped_events == 7 and stats.failed_batches >= 1
    writer.add_events(uid(1), event_rows(7, 1))  # after close: dropped, no exception
    assert writer.stats.dropped_events == 8
    store.close()


def test_postgres_connections_killed_mid_recording(
    store_url: str, exchange_fields: Fields, event_rows: Rows
) -> None:
    if store_url.startswith("sqlite"):
        pytest.skip("PostgreSQL only: a server restart drops every connection")
    store = Store.open(store_url)
    writer = Writer(store)
    writer.start()
    try:
        writer.begin(uid(1), **exchange_fields())
        writer.add_events(uid(1), event_rows(0, 5))
        assert writer.flush()
        app = make_url(store_url).query["application_name"]
        admin = create_engine(store_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name = :app AND pid <> pg_backend_pid()"
                ),
                {"app": app},
            )
        admin.dispose()
        writer.add_events(uid(1), event_rows(5, 5))
        writer.finish(uid(1), state="completed")
        assert writer.flush(timeout=10)
    finally:
        writer.close()
    assert stored(store) == {uid(1): list(range(10))}
    assert writer.stats.dropped_events == 0
    store.close()


class TcpForwarder:
    """A loopback TCP proxy to PostgreSQL that can be taken down and brought back."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self.conns: list[socket.socket] = []
        self.up()

    def up(self) -> None:
        self.server = socket.create_server(("127.0.0.1", self.port), reuse_port=False)
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._accept, args=(self.server,), daemon=True).start()

    def down(self) -> None:
        # shutdown() first: close() alone leaves a thread blocked in accept() listening.
        with contextlib.suppress(OSError):
            self.server.shutdown(socket.SHUT_RDWR)
        self.server.close()
        for s in self.conns:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        self.conns.clear()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_RDWR)


def test_postgres_outage_is_retried_until_the_server_is_back(
    store_url: str,
    exchange_fields: Fields,
    event_rows: Rows,
    caplog: pytest.LogCaptureFixture,
) -> None:
    if store_url.startswith("sqlite"):
        pytest.skip("PostgreSQL only: the server goes away")
    url = make_url(store_url)
    forwarder = TcpForwarder((url.host or "127.0.0.1", url.port or 5432))
    store = Store.open(url.set(host="127.0.0.1", port=forwarder.port).render_as_string(False))
    writer = Writer(store)
    writer.start()
    caplog.set_level(logging.INFO, logger="ssetape.storage")
    try:
        writer.begin(uid(1), **exchange_fields())
        writer.add_events(uid(1), event_rows(0, 5))
        assert writer.flush()
        forwarder.down()
        writer.add_events(uid(1), event_rows(5, 5))
        deadline = time.monotonic() + 5
        while writer.stats.failed_batches < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert writer.stats.failed_batches >= 2  # it kept trying while the server was away
        forwarder.up()
        writer.finish(uid(1), state="completed")
        assert writer.flush(timeout=10)
        assert stored(store) == {uid(1): list(range(10))}
    finally:
        writer.close()
        store.close()
        forwarder.down()
    assert writer.stats.dropped_events == 0
    lines = [r.getMessage() for r in caplog.records if r.name == "ssetape.storage"]
    assert sum("cannot write to" in m for m in lines) == 1, lines
    assert sum(" again after " in m for m in lines) == 1, lines
