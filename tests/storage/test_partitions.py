"""PostgreSQL's events in day partitions (issue 26), on the real server: a new store writes each
day into its own partition, an existing store is converted in place with nothing lost, prune
drops a day whole while a recorder writes (never one that holds an exchange it keeps), and a
batch repeated after midnight stores nothing twice."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Iterator

import pytest
from alembic import command
from sqlalchemy import create_engine, func, select, text

from ssetape.storage import partitions
from ssetape.storage.batch import BEGIN, EVENTS_OP, Batch, BatchSql
from ssetape.storage.models import Event, Exchange
from ssetape.storage.prune import Pruner, PruneReport
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store, alembic_config
from tests.addons.stores import pg_schema
from tests.ssetape.cli.test_prune_cli import cli, prune
from tests.storage.test_prune import CUT, NOW, OLD, Feed, chat_rows, counts, of, request_fields

TODAY = NOW.date()
DAY = dt.timedelta(days=1)


@pytest.fixture(autouse=True)
def clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The day as each test starts, not as the module was collected: partitions are named by
    the day the store sees, and a suite may cross midnight (UTC) between the two."""
    now = dt.datetime.now(dt.UTC)
    for name, value in {"NOW": now, "TODAY": now.date(), "OLD": now - (NOW - OLD),
                        "CUT": now - (NOW - CUT)}.items():  # fmt: skip
        monkeypatch.setitem(globals(), name, value)


@pytest.fixture
def store_url() -> Iterator[str]:
    """PostgreSQL only (conftest's ``store`` opens it)."""
    with pg_schema() as url:  # skips without SSETAPE_TEST_PG_URL
        yield url


def record_one(store: Store, events: int) -> str:
    """One finished exchange of ``events`` content events, committed."""
    feed = Feed(store)
    uid = feed.exchange(NOW, events)
    feed.settle()
    feed.close()
    return uid


def names(store: Store) -> list[str]:
    with store.engine.connect() as conn:
        return [p.name for p in partitions.partitions(conn)]


def where_events(store: Store, uids: list[str]) -> set[tuple[str, dt.date]]:
    """(partition, day) of the events of these exchanges."""
    with store.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT DISTINCT e.tableoid::regclass::text, e.day FROM events e "
                "JOIN exchanges x ON x.id = e.exchange_id WHERE x.uid = ANY(:u)"
            ),
            {"u": uids},
        )
        return {(name.split(".")[-1], day) for name, day in rows}


def move_events(store: Store, uids: list[str], day: dt.date) -> None:
    """Give these exchanges' events the day they would have had, written on ``day``."""
    with store.engine.begin() as conn:
        assert partitions.make(conn, day)
    with store.engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE events SET day = :d WHERE exchange_id IN "
                "(SELECT id FROM exchanges WHERE uid = ANY(:u))"
            ),
            {"d": day, "u": uids},
        )


def an_old_day(store: Store, n: int, events: int) -> dict[str, int]:
    """``n`` exchanges begun 40 days ago, their events in that day's partition: what they hold."""
    feed = Feed(store)
    gone = [feed.exchange(OLD + dt.timedelta(seconds=i), events) for i in range(n)]
    feed.settle()
    feed.close()
    move_events(store, gone, OLD.date())
    return counts(store, Exchange.uid.in_(gone))


def test_a_new_store_writes_each_day_into_a_partition_of_its_own(store: Store) -> None:
    assert names(store) == [
        partitions.partition_name(TODAY),
        partitions.partition_name(TODAY + DAY),
        partitions.DEFAULT,
    ]
    uid = record_one(store, 5)
    assert where_events(store, [uid]) == {(partitions.partition_name(TODAY), TODAY)}


def test_a_writer_makes_the_partitions_of_today_and_tomorrow_when_they_are_missing(
    store: Store,
) -> None:
    tomorrow = partitions.partition_name(TODAY + DAY)
    with store.engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE {tomorrow}")
    assert tomorrow not in names(store)
    record_one(store, 3)
    assert tomorrow in names(store)


def test_an_existing_store_is_converted_in_place_and_loses_nothing(store_url: str) -> None:
    engine = create_engine(store_url)
    cfg = alembic_config()
    with engine.begin() as conn:  # the store as ssetape 0.7 left it: events not partitioned
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0007")
    with engine.begin() as conn:
        fields = request_fields(OLD, "before", "old-recorder")
        xid = conn.execute(select(func.coalesce(func.max(Exchange.id), 0))).scalar_one() + 1
        conn.execute(
            Exchange.__table__.insert(),
            [{**fields, "id": xid, "uid": "a" * 32, "state": "completed", "event_count": 40}],
        )
        conn.execute(
            Event.__table__.insert(),
            [
                {
                    "exchange_id": xid,
                    "seq": r[0],
                    "offset_us": r[1],
                    "event": r[2],
                    "data": r[3],
                    "sse_id": r[4],
                    "raw": r[5],
                }
                for r in chat_rows(38)
            ],
        )
        before = conn.execute(text("SELECT seq, raw FROM events ORDER BY seq")).all()
    engine.dispose()

    store = Store.open(store_url)  # migrates to 0008
    try:
        with store.engine.connect() as conn:
            got = conn.execute(text("SELECT seq, raw FROM events ORDER BY seq")).all()
            legacy = conn.execute(text("SELECT DISTINCT tableoid::regclass::text FROM events"))
            assert {n.split(".")[-1] for (n,) in legacy} == {partitions.LEGACY}
        assert got == before and len(got) == 40
        # The legacy partition takes the migration's day; the first new one is tomorrow's.
        assert names(store) == [
            partitions.LEGACY,
            partitions.partition_name(TODAY + DAY),
            partitions.DEFAULT,
        ]
        uid = record_one(store, 4)
        assert where_events(store, [uid]) == {(partitions.LEGACY, TODAY)}
        assert list(Queries(store).events(xid))[-1].seq == 39
        # And back: a downgrade keeps every row too.
        with store.engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.downgrade(cfg, "0007")
            assert (
                conn.execute(text("SELECT count(*) FROM events")).scalar() == 40 + 4 + 2
            )  # its content, usage and [DONE]
    finally:
        store.close()


def test_prune_drops_a_day_whole_while_a_recorder_writes_and_never_one_it_must_keep(
    store: Store,
) -> None:
    feed = Feed(store)
    days = [OLD.date() + DAY * i for i in range(3)]
    gone = [feed.exchange(OLD + dt.timedelta(seconds=i), 30) for i in range(40)]
    flying = feed.begin(OLD + DAY)  # an old stream still coming in: its day stays
    feed.events(flying, chat_rows(6, done=False)[:6])
    slow = [feed.exchange(OLD + DAY, 7) for _ in range(3)]
    # Begun after the cut by the clock of a recorder ahead of the database's: its day stays.
    ahead = feed.exchange(NOW, 9)
    late = [feed.exchange(OLD + 2 * DAY, 5) for _ in range(2)]
    feed.settle()
    move_events(store, gone, days[0])
    move_events(store, [flying, *slow], days[1])
    move_events(store, [ahead, *late], days[2])
    old = [*gone, *slow, *late]
    before_old = counts(store, Exchange.uid.in_(old))
    kept_before = counts(store, Exchange.uid.in_([flying, ahead]))
    stop = threading.Event()

    def record() -> None:  # the proxy's side, meanwhile: today's streams
        k = 0
        while not stop.is_set():
            feed.exchange(NOW, 6, prompt=f"live {k}")
            time.sleep(0.005)
            k += 1

    first = partitions.partition_name(days[0])
    with store.engine.connect() as conn:
        size = conn.execute(text(f"SELECT pg_total_relation_size('{first}')")).scalar_one()
    recorder = threading.Thread(target=record, daemon=True)
    recorder.start()
    try:
        time.sleep(0.2)
        dry = Pruner(store).prune(CUT, dry_run=True)
        report = Pruner(store, batch_rows=50).prune(CUT)
    finally:
        stop.set()
        recorder.join(30)
    stats = feed.wind_down(flying)

    assert report.days_dropped == 1 and "1 day partition(s) dropped whole" in report.line()
    left = names(store)
    assert first not in left and report.bytes_returned == size > 0
    assert "B returned to the file system" in report.line()
    assert {partitions.partition_name(d) for d in days[1:]} <= set(left)
    assert of(report) == before_old == of(dry), "the counts are not what the store held"
    assert counts(store, Exchange.uid.in_(old))["exchanges"] == 0
    kept = counts(store, Exchange.uid.in_([flying, ahead]))
    # (The stream still coming in gets its findings when it finishes, after the prune.)
    assert {**kept, "findings": 0} == {**kept_before, "findings": 0} and kept["events"] == 6 + 11
    assert stats.failed_batches == 0, stats.last_error
    live = [u for u in feed.sent if u not in old]
    with store.Session() as s:
        per_uid = select(Exchange.uid, func.count(Event.seq)).join(
            Event, Event.exchange_id == Exchange.id
        )
        got = dict(s.execute(per_uid.where(Exchange.uid.in_(live)).group_by(Exchange.uid)).all())
    assert got == {u: feed.sent[u] for u in live} and len(live) > 10


def test_prune_whole_days_from_the_command_line(store_url: str, store: Store) -> None:
    """As a cron job runs it: the cut is the start of its UTC day, the day goes whole."""
    held = an_old_day(store, 5, 8)
    doc = prune(store_url, "--whole-days")
    assert doc["cut"] == f"{CUT.date().isoformat()}T00:00:00+00:00"
    assert doc["days_dropped"] == 1 and of(PruneReport(**{**doc, "cut": CUT})) == held
    assert partitions.partition_name(OLD.date()) not in names(store)
    line = cli("prune", "--db", store_url, "--older-than", "30d", "--whole-days").stdout
    assert line.startswith("pruned 0 exchange(s) started before ") and "00:00:00 UTC" in line


def test_a_batch_repeated_after_midnight_stores_no_event_twice(store: Store) -> None:
    sql = BatchSql(store.engine, is_sqlite=False)
    uid = "b" * 32
    rows = chat_rows(5)
    ops = [(BEGIN, uid, request_fields(NOW, "twice", "r")), (EVENTS_OP, uid, rows)]
    Batch(ops, {}).apply(store.writing_engine, sql)
    # Its commit was not acknowledged and the day turned before the writer tried again.
    move_events(store, [uid], TODAY - DAY)
    again = Batch(ops, {})
    again.apply(store.writing_engine, sql, careful=True)
    with store.engine.connect() as conn:
        seqs = conn.execute(text("SELECT seq FROM events ORDER BY seq")).scalars().all()
    assert seqs == list(range(len(rows)))
    assert Queries(store).exchange(uid) is not None and Queries(store).exchange(
        uid
    ).event_count == len(rows)  # type: ignore[union-attr]


def test_a_prune_stopped_between_detach_and_drop_is_finished_by_the_next(store: Store) -> None:
    held = an_old_day(store, 6, 10)
    with store.engine.begin() as conn:  # the first prune got this far
        left = partitions.detach(conn, partitions.partition_name(OLD.date()))
    with store.engine.connect() as conn:
        assert partitions.leftovers(conn) == [left]
    report = Pruner(store).prune(CUT)
    assert of(report) == held and report.days_dropped == 1
    with store.engine.connect() as conn:
        assert partitions.leftovers(conn) == []
        assert conn.execute(text("SELECT to_regclass(:t)"), {"t": left}).scalar() is None


def test_a_day_still_written_is_never_dropped_whatever_the_cut(store: Store) -> None:
    """A cut in the future takes every exchange, but today's partition stays: a stream begun
    after the prune looked would still be writing into it."""
    feed = Feed(store)
    uids = [feed.exchange(NOW, 4) for _ in range(3)]
    feed.settle()
    feed.close()
    held = counts(store, Exchange.uid.in_(uids))
    report = Pruner(store, batch_rows=5).prune(NOW + 400 * DAY)
    # Each exchange's 6 events are more than a batch of 5: two slices and its own row.
    assert report.days_dropped == 0 and of(report) == held and report.batches == 9
    assert partitions.partition_name(TODAY) in names(store)
