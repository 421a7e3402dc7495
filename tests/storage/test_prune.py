"""Retention (issue 26) as an operator relies on it, on real SQLite files and PostgreSQL: every
count a prune reports is what left the store, nothing newer than the cut or still recording is
touched, batches stay bounded and a stopped prune resumes, a recorder writing meanwhile loses
nothing, and SQLite gives the space back.

The stores are filled the way the recorder fills them: a Writer fed stream rows, each finished
exchange analysed (model, usage, outcome, cost, findings) as the recording process does."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from sqlalchemy import func, select

from ssetape.analysis.knowledge import Knowledge
from ssetape.recorder_id import RecorderId
from ssetape.records import EventRow
from ssetape.storage.ledger import WriterStats
from ssetape.storage.models import Chunk, Event, Exchange, Finding
from ssetape.storage.prune import Pruner, PruneReport
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from ssetape.storage.writer import Writer

NOW = dt.datetime.now(dt.UTC)
OLD = NOW - dt.timedelta(days=40)  # recorded long ago: goes
CUT = NOW - dt.timedelta(days=30)  # `--older-than 30d`
COUNTED = ("exchanges", "events", "chunks", "findings")
# What an events-only prune must leave of an exchange: its summary, the audit trail.
SUMMARY = ("uid", "started_at", "state", "status", "model", "outcome", "input_tokens",
           "output_tokens", "total_tokens", "cost_nusd", "price_model", "duration_us",
           "ttfb_us", "event_count", "error", "request_body")  # fmt: skip


def chat_rows(n: int, *, done: bool = True, bad_json: bool = False, pad: int = 0) -> list[EventRow]:
    """An OpenAI chat stream of ``n`` content chunks, its usage chunk and (``done``) its
    ``[DONE]``; ``bad_json``: one chunk is not JSON (a finding); ``pad``: bytes of text per
    chunk (to make a store big)."""
    rows: list[EventRow] = []

    def add(data: str) -> None:
        seq = len(rows)
        rows.append((seq, seq * 1000, None, data, None, f"data: {data}\n\n".encode()))

    for i in range(n):
        delta = {"content": f"w{i} " + "x" * pad}
        add(orjson.dumps({"id": "c1", "object": "chat.completion.chunk", "model": "gpt-4o-mini",
                          "choices": [{"index": 0, "delta": delta}]}).decode())  # fmt: skip
        if bad_json and i == 0:
            add("{not json")
    usage = {"prompt_tokens": 10, "completion_tokens": n, "total_tokens": 10 + n}
    add(orjson.dumps({"id": "c1", "object": "chat.completion.chunk", "model": "gpt-4o-mini",
                      "choices": [], "usage": usage}).decode())  # fmt: skip
    if done:
        add("[DONE]")
    return rows


def request_fields(started_at: dt.datetime, prompt: str, recorder: str) -> dict[str, Any]:
    body = {"model": "gpt-4o-mini", "stream": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": prompt}]}  # fmt: skip
    return {
        "started_at": started_at,
        "method": "POST",
        "scheme": "https",
        "host": "api.openai.com",
        "port": 443,
        "path": "/v1/chat/completions",
        "query": "",
        "http_version": "HTTP/1.1",
        "request_headers": [["content-type", "application/json"]],
        "request_body": orjson.dumps(body),
        "fingerprint": hashlib.sha256(prompt.encode()).hexdigest(),
        "is_stream": True,
        "recorder": recorder,
    }


class Feed:
    """A recorder's side of the store: a Writer fed whole exchanges, each analysed once its
    finish is committed (as the recording process does), under this process's recorder id
    (alive, so no command mistakes what it leaves recording for abandoned)."""

    def __init__(self, store: Store, *, analyse: bool = True) -> None:
        knowledge = Knowledge(store) if analyse else None
        self.writer = Writer(store, on_finished=knowledge.save_live if knowledge else None)
        self.writer.start()
        self.recorder = str(RecorderId.current())
        self.sent: dict[str, int] = {}  # uid -> events handed to the writer
        self._n = 0

    def begin(self, started_at: dt.datetime, prompt: str | None = None) -> str:
        self._n += 1
        uid = f"{self._n:08x}{int(started_at.timestamp()):024x}"
        self.writer.begin(
            uid, **request_fields(started_at, prompt or f"prompt {uid}", self.recorder)
        )
        self.writer.update(uid, status=200, reason="OK",
                           response_headers=[["content-type", "text/event-stream"]])  # fmt: skip
        self.sent[uid] = 0
        return uid

    def events(self, uid: str, rows: list[EventRow]) -> None:
        start = self.sent[uid]
        self.writer.add_events(uid, [(start + r[0], *r[1:]) for r in rows])
        self.sent[uid] += len(rows)

    def exchange(
        self,
        started_at: dt.datetime,
        n: int,
        *,
        chunks: int = 0,
        done: bool = True,
        bad_json: bool = False,
        pad: int = 0,
        prompt: str | None = None,
    ) -> str:
        """One finished exchange of ``n`` content events (and ``chunks`` wire chunks)."""
        uid = self.begin(started_at, prompt)
        self.events(uid, chat_rows(n, done=done, bad_json=bad_json, pad=pad))
        if chunks:
            self.writer.add_chunks(
                uid, [(i, i * 1000, b"\x1f\x8b" + bytes(30)) for i in range(chunks)]
            )
        self.writer.finish(uid, state="completed", ttfb_us=1_000, duration_us=50_000)
        return uid

    def settle(self) -> None:
        assert self.writer.flush(timeout=60), "the writer did not commit in time"

    def wind_down(self, flying: str) -> WriterStats:
        """Finish the stream left coming in, commit everything, stop: the writer's counts."""
        self.writer.finish(flying, state="completed")
        self.settle()
        stats = self.writer.stats
        self.close()
        return stats

    def close(self) -> None:
        self.writer.close()
        st = self.writer.stats
        assert (st.dropped_events, st.dropped_chunks, st.dropped_exchanges) == (0, 0, 0), st


@pytest.fixture
def feed(store: Store) -> Iterator[Feed]:
    f = Feed(store)
    try:
        yield f
    finally:
        f.writer.close()


def counts(store: Store, where: Any = None) -> dict[str, int]:
    """Rows the store holds (of the exchanges ``where`` selects)."""
    ids = select(Exchange.id)
    if where is not None:
        ids = ids.where(where)
    sub = ids.scalar_subquery()
    with store.Session() as s:
        return {
            "exchanges": s.scalar(select(func.count()).where(Exchange.id.in_(sub))) or 0,
            "events": s.scalar(select(func.count()).where(Event.exchange_id.in_(sub))) or 0,
            "chunks": s.scalar(select(func.count()).where(Chunk.exchange_id.in_(sub))) or 0,
            "findings": s.scalar(select(func.count()).where(Finding.exchange_id.in_(sub))) or 0,
        }


def of(report: PruneReport) -> dict[str, int]:
    return {k: getattr(report, k) for k in COUNTED}


def minus(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: before[k] - after[k] for k in COUNTED}


def snapshot(store: Store, uids: list[str]) -> dict[str, Any]:
    """Everything stored of these exchanges: their row, events, chunks and findings."""
    out: dict[str, Any] = {}
    with store.Session() as s:
        for uid in uids:
            x = s.scalar(select(Exchange).where(Exchange.uid == uid))
            assert x is not None, uid
            row = {c.key: getattr(x, c.key) for c in Exchange.__mapper__.column_attrs}
            events = s.execute(select(Event.seq, Event.raw).where(Event.exchange_id == x.id)
                               .order_by(Event.seq)).all()  # fmt: skip
            chunks = s.execute(select(Chunk.seq, Chunk.data).where(Chunk.exchange_id == x.id)
                               .order_by(Chunk.seq)).all()  # fmt: skip
            found = s.execute(select(Finding.n, Finding.code, Finding.detail)
                              .where(Finding.exchange_id == x.id)).all()  # fmt: skip
            out[uid] = (row, events, chunks, found)
    return out


def summary(store: Store, uids: list[str]) -> dict[str, tuple[Any, ...]]:
    with store.Session() as s:
        rows = s.execute(select(*(getattr(Exchange, c) for c in SUMMARY))
                         .where(Exchange.uid.in_(uids))).all()  # fmt: skip
    return {row[0]: tuple(row) for row in rows}


def old_tape(feed: Feed, n: int = 24) -> tuple[list[str], list[str], str]:
    """``n`` old finished exchanges (some cut short, some with a bad event: findings; some
    with wire chunks), four newer than the cut, and an old one still recording."""
    old = [
        feed.exchange(
            OLD + dt.timedelta(minutes=i),
            3 + i % 7,
            chunks=2 * (i % 3),
            done=i % 4 != 0,
            bad_json=i % 5 == 0,
        )
        for i in range(n)
    ]
    new = [feed.exchange(NOW - dt.timedelta(days=i), 5, chunks=1, done=i != 2) for i in range(4)]
    flying = feed.begin(OLD)
    feed.events(flying, chat_rows(4, done=False)[:4])
    feed.settle()
    return old, new, flying


def test_dry_run_counts_what_the_prune_then_removes_and_spares_the_rest(
    store: Store, feed: Feed
) -> None:
    old, new, flying = old_tape(feed)
    spared = snapshot(store, [*new, flying])
    before = counts(store)
    held = counts(store, Exchange.uid.in_(old))
    assert held["findings"] > 0 and held["chunks"] > 0  # the counts mean something

    dry = Pruner(store).prune(CUT, dry_run=True)
    assert counts(store) == before, "a dry run deleted something"
    assert dry.in_flight == 1 and dry.batches == 0

    done = Pruner(store).prune(CUT)
    after = counts(store)
    assert of(done) == minus(before, after) == of(dry) == held
    assert done.in_flight == 1 and done.batches >= 1
    assert snapshot(store, [*new, flying]) == spared, "a newer or in-flight exchange changed"
    with store.Session() as s:
        assert s.scalar(select(func.count()).where(Exchange.uid.in_(old))) == 0

    # The recorder goes on with the exchange it had in flight: nothing of it was lost.
    feed.events(flying, chat_rows(0))  # its usage chunk and [DONE]
    feed.writer.finish(flying, state="completed")
    feed.settle()
    still = Queries(store).exchange(flying)
    assert still is not None and len(list(Queries(store).events(still.id))) == feed.sent[flying]
    feed.close()


def test_events_only_keeps_each_summary_and_a_second_run_does_nothing(
    store: Store, feed: Feed
) -> None:
    old, new, flying = old_tape(feed)
    feed.close()
    spared = snapshot(store, [*new, flying])
    kept = summary(store, old)
    assert all(k[SUMMARY.index("model")] == "gpt-4o-mini" for k in kept.values())
    assert all(k[SUMMARY.index("cost_nusd")] for k in kept.values()), "fixture: priced"
    before = counts(store)
    old_findings = snapshot(store, old)

    dry = Pruner(store).prune(CUT, events_only=True, dry_run=True)
    assert counts(store) == before
    done = Pruner(store).prune(CUT, events_only=True)
    after = counts(store)
    assert of(done) == of(dry)
    assert done.exchanges == len(old) and done.findings == 0 and done.in_flight == 1
    assert minus(before, after) == {**of(done), "exchanges": 0}  # the rows stay
    assert summary(store, old) == kept, "an events-only prune changed a summary"
    now = snapshot(store, old)
    for uid in old:
        row, events, chunks, found = now[uid]
        assert (events, chunks) == ([], [])
        assert found == old_findings[uid][3], "findings are the audit trail: kept"
        assert row["events_pruned_at"] is not None
    assert snapshot(store, [*new, flying]) == spared

    again = Pruner(store).prune(CUT, events_only=True)
    assert of(again) == dict.fromkeys(COUNTED, 0) and again.batches == 0
    assert Pruner(store).prune(CUT, events_only=True, dry_run=True).exchanges == 0
    assert counts(store) == after

    # Later the summaries go too: the whole prune counts the rows they still had.
    whole = Pruner(store).prune(CUT)
    assert of(whole) == minus(after, counts(store))
    assert whole.exchanges == len(old) and whole.events == 0
    assert whole.findings == sum(len(f[3]) for f in old_findings.values()) > 0


def batches_of(pruner: Pruner, **kw: Any) -> tuple[PruneReport, list[dict[str, int]]]:
    """The prune and what each of its batches removed (from the running totals)."""
    steps: list[dict[str, int]] = []
    last = dict.fromkeys(COUNTED, 0)

    def on_batch(r: PruneReport) -> None:
        now = of(r)
        steps.append({k: now[k] - last[k] for k in COUNTED})
        last.update(now)

    report = pruner.prune(CUT, on_batch=on_batch, **kw)
    assert len(steps) == report.batches
    return report, steps


@pytest.mark.parametrize("events_only", [False, True], ids=["whole", "events-only"])
def test_batches_stay_bounded_and_a_big_exchange_goes_in_slices(
    store: Store, feed: Feed, events_only: bool
) -> None:
    for i in range(30):
        feed.exchange(OLD + dt.timedelta(seconds=i), 2 + i % 9)
    big = feed.exchange(OLD + dt.timedelta(seconds=15, milliseconds=1), 80)  # > batch_rows
    feed.close()
    per = {x.uid: x.event_count for x in Queries(store).exchanges()}
    assert per[big] > 50
    before = counts(store)

    report, steps = batches_of(Pruner(store, batch_rows=50), events_only=events_only)
    assert report.batches > 1 and report.events == before["events"]
    # No batch deletes more than 50 events: the big exchange's go in slices of 50 (no
    # exchange done yet), then it goes alone with what is left of it.
    assert all(step["events"] <= 50 for step in steps), steps
    slices = [step["events"] for step in steps if step["exchanges"] == 0]
    assert slices and sum(slices) <= per[big] and len(slices) >= per[big] // 50
    assert sum(s["events"] for s in steps) == report.events
    assert [s["exchanges"] for s in steps].count(1) >= 1


def test_a_batch_counts_wire_chunks_against_its_bound(store: Store, feed: Feed) -> None:
    """`--batch-rows`: "Events and chunks deleted per transaction, at most"."""
    for i in range(20):
        feed.exchange(OLD + dt.timedelta(seconds=i), 4, chunks=20)  # 6 events, 20 chunks
    feed.close()
    report, steps = batches_of(Pruner(store, batch_rows=50))
    assert report.chunks == 400 and report.events == 120
    over = [s for s in steps if s["events"] + s["chunks"] > 50 and s["exchanges"] > 1]
    assert not over, f"batches deleting more than 50 events and chunks: {over}"


class Stop(Exception):
    pass


def test_a_prune_stopped_after_a_batch_keeps_it_and_the_next_run_finishes(
    store: Store, feed: Feed
) -> None:
    old, new, flying = old_tape(feed, n=30)
    feed.close()
    before = counts(store)
    expected = Pruner(store).prune(CUT, dry_run=True)
    seen: list[PruneReport] = []

    def stop(r: PruneReport) -> None:
        seen.append(dataclasses.replace(r))
        raise Stop  # Ctrl-C after the first batch

    with pytest.raises(Stop):
        Pruner(store, batch_rows=40).prune(CUT, on_batch=stop)
    first = seen[0]
    assert 0 < first.exchanges < len(old)
    assert minus(before, counts(store)) == of(first), "the reported batch is not what left"

    rest = Pruner(store, batch_rows=40).prune(CUT)
    assert {k: of(first)[k] + of(rest)[k] for k in COUNTED} == of(expected)
    assert minus(before, counts(store)) == of(expected)
    assert counts(store, Exchange.uid.in_(old))["exchanges"] == 0
    assert counts(store, Exchange.uid.in_([*new, flying]))["exchanges"] == 5


def test_a_recorder_writing_through_the_prune_loses_nothing(store: Store, feed: Feed) -> None:
    old = [feed.exchange(OLD + dt.timedelta(seconds=i), 12, chunks=i % 2) for i in range(250)]
    flying = feed.begin(OLD)  # an old stream still coming in: kept, and still fed
    feed.settle()
    before_old = counts(store, Exchange.uid.in_(old))
    stop = threading.Event()

    def record() -> None:  # the proxy's side: new streams, a few events at a time
        k = 0
        while not stop.is_set():
            uid = feed.begin(NOW, prompt=f"live {k}")
            for part in range(4):
                rows = chat_rows(6, done=part == 3)
                feed.events(uid, rows if part == 3 else rows[:6])
                time.sleep(0.002)
            feed.writer.finish(uid, state="completed")
            feed.events(flying, chat_rows(1, done=False)[:1])
            k += 1

    recorder = threading.Thread(target=record, daemon=True)
    recorder.start()
    overlap: list[int] = []

    def on_batch(r: PruneReport) -> None:
        if r.batches == 1:  # make sure the recorder commits while the prune is under way
            events = feed.writer.stats.events
            deadline = time.monotonic() + 10
            while feed.writer.stats.events == events and time.monotonic() < deadline:
                time.sleep(0.01)
            overlap.append(feed.writer.stats.events - events)

    try:
        report = Pruner(store, batch_rows=300).prune(CUT, on_batch=on_batch)
    finally:
        stop.set()
        recorder.join(30)
    stats = feed.wind_down(flying)

    assert overlap and overlap[0] > 0, "the recorder did not write during the prune"
    assert report.batches > 1 and report.in_flight == 1
    assert of(report) == before_old, "the prune's counts are not what the old exchanges held"
    assert counts(store, Exchange.uid.in_(old))["exchanges"] == 0
    assert stats.failed_batches == 0, stats.last_error
    # Every event the recorder handed over is in the store, in its exchange.
    live = [u for u in feed.sent if u not in old]
    with store.Session() as s:
        per_uid = select(Exchange.uid, func.count(Event.seq)).join(
            Event, Event.exchange_id == Exchange.id
        )
        got = dict(s.execute(per_uid.where(Exchange.uid.in_(live)).group_by(Exchange.uid)).all())
    assert got == {u: feed.sent[u] for u in live}
    assert len(live) > 2


def test_an_exchange_counted_as_still_recording_is_still_there(store: Store, feed: Feed) -> None:
    """The report says the exchanges recording when the prune began were kept; one that
    finishes while the prune runs must then still be in the store."""
    for i in range(10):
        feed.exchange(OLD + dt.timedelta(seconds=i), 5)
    flying = feed.begin(OLD - dt.timedelta(seconds=1))
    feed.events(flying, chat_rows(3, done=False))
    feed.settle()

    def on_batch(r: PruneReport) -> None:
        if r.batches == 1:  # it finishes while the prune is under way
            feed.writer.finish(flying, state="completed")
            feed.settle()

    report = Pruner(store, batch_rows=10).prune(CUT, on_batch=on_batch)
    feed.close()
    assert report.in_flight == 1
    assert Queries(store).exchange(flying) is not None, (
        f"reported {report.in_flight} still recording, kept; but it was deleted "
        f"(report: {report.line()})"
    )


# -- space (SQLite) -----------------------------------------------------------


def file_size(path: Path) -> int:
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())


def big_tape(store: Store, old: int, new: int) -> None:
    """About 0.1 MB per exchange: ``old`` ones before the cut, ``new`` after."""
    feed = Feed(store, analyse=False)
    for i in range(old + new):
        feed.exchange(OLD if i < old else NOW, 48, pad=1000)
        if i % 50 == 49:
            feed.settle()
    feed.close()
    checkpoint(store.path)


def checkpoint(path: Path | None) -> None:
    assert path is not None
    with sqlite3.connect(path) as c:
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()


def pragma(path: Path, name: str) -> int:
    with sqlite3.connect(path) as c:
        return int(c.execute(f"PRAGMA {name}").fetchone()[0])


def test_a_new_sqlite_store_gives_the_space_back_as_it_prunes(tmp_path: Path) -> None:
    path = tmp_path / "tape.db"
    with Store.open(str(path)) as store:
        assert pragma(path, "auto_vacuum") == 2  # incremental, from the first byte
        big_tape(store, old=130, new=20)
        size = file_size(path)
        assert size > 20e6
        report = Pruner(store).prune(CUT)
        after = file_size(path)
    assert report.exchanges == 130
    assert report.bytes_returned is not None and report.bytes_returned > 0
    assert report.bytes_returned == size - after, "bytes_returned is not what the file lost"
    free = pragma(path, "freelist_count") * pragma(path, "page_size")
    assert after < size * 0.3, (
        f"pruning 130 of 150 exchanges: {size:,} -> {after:,} bytes in {report.batches} "
        f"batch(es); {free:,} bytes freed but still in the file"
    )


def test_an_older_store_shrinks_only_when_vacuumed(tmp_path: Path) -> None:
    path = tmp_path / "tape.db"
    Store.open(str(path)).close()
    with sqlite3.connect(path) as c:  # as stores were made before incremental auto-vacuum
        c.execute("PRAGMA auto_vacuum = NONE")
        c.execute("VACUUM")
    assert pragma(path, "auto_vacuum") == 0
    with Store.open(str(path)) as store:
        big_tape(store, old=130, new=20)
        assert pragma(path, "auto_vacuum") == 0, "opening the store changed its layout"
        size = file_size(path)
        pruner = Pruner(store)
        report = pruner.prune(CUT)
        assert report.exchanges == 130 and not report.bytes_returned
        assert file_size(path) == size
        returned = pruner.vacuum()
        assert returned == size - file_size(path) and file_size(path) < size * 0.3
        assert pragma(path, "auto_vacuum") == 2  # later prunes give space back as they go
