"""The front ends' query layer on both backends: exchanges newest first in keyset pages,
narrowed by a filter; an exchange's events a page at a time, by seq, however many there are
and wherever the range starts; the rows `ssetape stats` groups."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest

from ssetape.records import EventRow
from ssetape.storage import narrowing as narrowing_module
from ssetape.storage.filters import ExchangeFilter
from ssetape.storage.models import Chunk, Event, Exchange, Finding
from ssetape.storage.queries import EventSpan, Queries
from ssetape.storage.store import Store


def test_events_come_in_pages_by_seq(
    store: Store,
    exchange_fields: Callable[..., dict[str, Any]],
    event_rows: Callable[..., list[EventRow]],
) -> None:
    with store.Session.begin() as s:
        x = Exchange(uid="q" * 32, state="completed", **exchange_fields())
        s.add(x)
        s.flush()
        xid = x.id
        # Stored out of order and with a hole: pages follow seq, not insertion.
        rows = [r for r in event_rows(0, 25) if r[0] != 7][::-1]
        s.add_all(
            Event(exchange_id=xid, seq=seq, offset_us=off, event=ev, data=d, sse_id=i, raw=raw)
            for seq, off, ev, d, i, raw in rows
        )
        s.add_all(Chunk(exchange_id=xid, seq=n, offset_us=n, data=b"c%d" % n) for n in range(12))
    queries = Queries(store, page=5)
    seqs = [n for n in range(25) if n != 7]
    assert [e.seq for e in queries.events(xid)] == seqs
    assert [e.seq for e in queries.events(xid, start=6, stop=12)] == [6, 8, 9, 10, 11]
    assert [e.seq for e in queries.events_page(xid, after_seq=20)] == [21, 22, 23, 24]
    assert [t.seq for t in queries.timings(xid)] == seqs
    assert [t.seq for t in Queries(store, page=2).timings(xid)] == seqs  # pages of 10
    assert [(r.seq, r.raw) for r in queries.event_rows(xid)] == sorted((r[0], r[5]) for r in rows)
    assert [c.seq for c in queries.chunks(xid)] == list(range(12))
    span = queries.event_span(xid)
    assert (span.count, span.last_offset_us) == (24, 24_000)
    assert queries.event_span(xid, stop=10).count == 9
    assert queries.event_bytes(xid) == sum(len(r[5]) for r in rows)
    assert queries.event_span(xid + 1) == EventSpan(0, None)
    found = queries.exchange(xid)
    assert found is not None and found.uid == "q" * 32
    assert [x.id for x in queries.exchanges(limit=1)] == [xid]


def test_exchanges_events_and_chunks_are_read_through_queries_only() -> None:
    """One query layer: the store opens, migrates and keeps settings, but has no read of
    exchanges, events or chunks of its own (Store.events read a whole stream into a list)."""
    assert not {"exchange", "exchanges", "events", "chunks"} & set(dir(Store))
    public = [n for n in dir(Store) if not n.startswith("_") and callable(getattr(Store, n))]
    reads = [n for n in public if any(w in n for w in ("exchange", "event", "chunk"))]
    assert reads == [], reads


# Both ways SQLite reads a filtered page (see storage.narrowing): a value this few exchanges
# have through its index, one that many have along the time index.
@pytest.mark.parametrize("common", [None, 2], ids=["rare", "common"])
def test_exchanges_come_newest_first_in_keyset_pages_narrowed_by_a_filter(
    store: Store,
    exchange_fields: Callable[..., dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    common: int | None,
) -> None:
    """The pages a viewer walks, "older" link after "older" link: every exchange once, in
    order, with ties on started_at split by id, and only those the filter names."""
    if common is not None:
        monkeypatch.setattr(narrowing_module, "COMMON", common)
    t0 = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    with store.Session.begin() as s:
        for n in range(23):
            # Three exchanges share each start time: the id breaks the tie.
            at = t0 + dt.timedelta(seconds=n // 3)
            odd = n % 2 == 1
            s.add(
                Exchange(
                    uid=f"{n:032d}",
                    state="completed",
                    **exchange_fields(
                        started_at=at,
                        host="api.anthropic.com" if odd else "api.openai.com",
                        model="claude-sim" if odd else "gpt-4o-mini",
                        api="messages" if odd else "chat_completions",
                        outcome="refused" if n == 5 else "completed",
                        output_text=f"answer {n} 100%_done" if n == 9 else f"answer {n}",
                    ),
                )
            )
    queries = Queries(store)
    everything = queries.exchanges()
    assert len(everything) == 23
    keys = [(x.started_at, x.id) for x in everything]
    assert keys == sorted(keys, reverse=True)

    def walk(flt: ExchangeFilter | None, size: int) -> list[int]:
        seen: list[int] = []
        before: int | None = None
        while page := queries.exchanges(flt, limit=size, before=before):
            seen += [x.id for x in page]
            before = page[-1].id
        return seen

    assert walk(None, 4) == [x.id for x in everything]
    anthropic = [x.id for x in everything if x.host == "api.anthropic.com"]
    assert walk(ExchangeFilter(host="API.Anthropic.com"), 3) == anthropic
    assert walk(ExchangeFilter(model="claude", api="messages"), 5) == anthropic
    assert [x.uid for x in queries.exchanges(ExchangeFilter(outcome="refused"))] == [f"{5:032d}"]
    # The text filter is literal: % and _ are not wildcards.
    assert [x.uid for x in queries.exchanges(ExchangeFilter(text="100%_"))] == [f"{9:032d}"]
    since = ExchangeFilter(since=t0 + dt.timedelta(seconds=6))
    assert {x.uid for x in queries.exchanges(since)} == {f"{n:032d}" for n in range(18, 23)}
    # A live view: what came after the newest it has shown.
    newest = queries.last_id()
    assert newest == max(x.id for x in everything)
    assert [x.id for x in queries.exchanges_after(newest - 2)] == [newest - 1, newest]
    assert [x.id for x in queries.exchanges_by_id([newest, -1])] == [newest]


def test_finding_counts_and_stat_rows(
    store: Store, exchange_fields: Callable[..., dict[str, Any]]
) -> None:
    with store.Session.begin() as s:
        xs = [
            Exchange(uid=f"s{n:031d}", state="completed", **exchange_fields(model=m, ttfb_us=t))
            for n, (m, t) in enumerate([("a", 10), ("a", 30), ("b", None)])
        ]
        s.add_all(xs)
        s.flush()
        s.add_all(
            Finding(exchange_id=xs[0].id, n=n, code="missing_usage", event_seq=None, detail="d")
            for n in range(3)
        )
        ids = [x.id for x in xs]
    queries = Queries(store)
    assert queries.finding_counts(ids) == {ids[0]: 3}
    assert [f.n for f in queries.findings(ids[0])] == [0, 1, 2]
    rows = sorted(queries.stat_rows("model", ExchangeFilter()), key=lambda r: r.group)
    assert [(r.group, r.ttfb_us) for r in rows] == [("a", 10), ("a", 30), ("b", None)]
    assert [r.group for r in queries.stat_rows(None, ExchangeFilter(model="b"))] == [None]
