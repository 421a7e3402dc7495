"""The front ends' query layer on both backends: an exchange's events a page at a time, by
seq, however many there are and wherever the range starts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ssetape.records import EventRow
from ssetape.storage.models import Chunk, Event, Exchange
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
