"""What open pages receive as the store grows: Server-Sent Events, from polling the store.

A recorder writes into the store from another process, so there is nothing to subscribe to:
each stream reads what is new every :data:`POLL_S` seconds, in a worker thread (the drivers
block), and sends it rendered, escaped here like the rest of the page.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from typing import Any

import anyio
import orjson

from ssetape.storage.models import Exchange
from ssetape.storage.queries import Queries
from ssetape.vocabulary import ExchangeState
from ssetape.web.exchange_page import EVENTS_PER_PAGE, event_rows
from ssetape.web.list_page import ListView, row_html

__all__ = ["POLL_S", "WATCH_MAX", "events_stream", "exchanges_stream"]

POLL_S = 1.0
# Exchanges in flight a live list follows at most (their rows change as they go on).
WATCH_MAX = 100
# New exchanges sent per poll at most; the rest come on the next.
_NEW_MAX = 100
_IDLE = b": idle\n\n"  # a closed connection shows on the next write


def _message(kind: bytes, last_id: int, obj: object) -> bytes:
    return b"id: %d\nevent: %s\ndata: %s\n\n" % (last_id, kind, orjson.dumps(obj))


async def exchanges_stream(
    queries: Queries, view: ListView, after: int, watch: set[int]
) -> AsyncIterator[bytes]:
    """New exchanges matching the list's filters (and the rows of those in flight, as they
    change), each ``{"id", "html"}``: the row the list shows."""
    yield b"retry: 2000\n\n"
    seen: dict[int, tuple[Any, ...]] = {}
    while True:
        rows = await anyio.to_thread.run_sync(_poll, queries, view, after, watch, seen)
        for x_id, html in rows:
            after = max(after, x_id)
            yield _message(b"exchange", after, {"id": x_id, "html": html})
        if not rows:
            yield _IDLE
        await anyio.sleep(POLL_S)


def _poll(
    queries: Queries, view: ListView, after: int, watch: set[int], seen: dict[int, tuple[Any, ...]]
) -> list[tuple[int, str]]:
    """The rows to send: those in flight whose row changed, then new exchanges."""
    new = queries.exchanges_after(after, view.filters, limit=_NEW_MAX)
    old = [x for x in queries.exchanges_by_id(sorted(watch)) if x.id <= after]
    changed: list[Exchange] = []
    for x in [*old, *new]:
        look = (x.state, x.event_count, x.outcome, x.status, x.duration_us, x.ttft_us)
        if seen.get(x.id) != look:
            seen[x.id] = look
            changed.append(x)
        # Followed while in flight, and once more when it is done.
        if x.state == ExchangeState.RECORDING and (x.id in watch or len(watch) < WATCH_MAX):
            watch.add(x.id)
        else:
            watch.discard(x.id)
    for gone in seen.keys() - watch:  # only rows in flight come back: the rest is done with
        del seen[gone]
    counts = queries.finding_counts([x.id for x in changed])
    return [(x.id, row_html(x, counts.get(x.id, 0))) for x in changed]


async def events_stream(
    queries: Queries, exchange_id: int, after: int, offset: int | None
) -> AsyncIterator[bytes]:
    """The events of a stream in flight stored after seq ``after``, each ``{"seq", "html"}``
    (its row of the events table), then ``done`` once the exchange is over and all are sent."""
    yield b"retry: 2000\n\n"
    while True:
        # The state first: events stored before it changed are all read below.
        x = await anyio.to_thread.run_sync(queries.exchange, exchange_id)
        page = functools.partial(queries.events_page, after_seq=after, limit=EVENTS_PER_PAGE)
        events = await anyio.to_thread.run_sync(page, exchange_id)
        for e, html in zip(events, event_rows(exchange_id, events, offset), strict=True):
            after, offset = e.seq, e.offset_us
            yield _message(b"event", after, {"seq": e.seq, "html": html})
        if x is None or (x.state != ExchangeState.RECORDING and len(events) < EVENTS_PER_PAGE):
            yield _message(b"done", after, {"state": None if x is None else x.state})
            return
        if not events:
            yield _IDLE
        await anyio.sleep(POLL_S)
