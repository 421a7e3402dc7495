"""What open pages receive as the store grows: Server-Sent Events, from polling the store.

A recorder writes into the store from another process, so there is nothing to subscribe to:
each stream reads what is new every :data:`POLL_S` seconds, in a worker thread (the drivers
block; the live streams share a few threads of their own, so pages are never kept waiting for
one), and sends it rendered, escaped here like the rest of the page. A poll reads the columns
a row or the page's figures show, never an exchange's bodies (see
:mod:`ssetape.storage.page_reads`); how many streams are open, and how far behind a client
may fall, is :mod:`ssetape.web.live_clients`'s to bound.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncGenerator, Callable
from typing import Any, TypeVar

import anyio
import orjson

from ssetape.storage.models import Exchange
from ssetape.storage.page_reads import ListRow, PageReads
from ssetape.storage.queries import Queries
from ssetape.vocabulary import ExchangeState
from ssetape.web.exchange_page import EVENTS_PER_PAGE, ExchangePage, event_rows
from ssetape.web.html import TEXT_SHOWN, cut
from ssetape.web.list_page import ListView, row_html
from ssetape.web.live_clients import poll_threads
from ssetape.web.playback import Playback

__all__ = ["POLL_S", "WATCH_MAX", "events_stream", "exchanges_stream"]

POLL_S = 1.0
# Exchanges in flight a live list follows at most (their rows change as they go on).
WATCH_MAX = 100
# New exchanges sent per poll at most; the rest come on the next.
_NEW_MAX = 100
_IDLE = b": idle\n\n"
T = TypeVar("T")  # a closed connection shows on the next write


def _message(kind: bytes, last_id: int, obj: object) -> bytes:
    return b"id: %d\nevent: %s\ndata: %s\n\n" % (last_id, kind, orjson.dumps(obj))


async def exchanges_stream(
    current: Callable[[], Queries | None], view: ListView, after: int, watch: set[int]
) -> AsyncGenerator[bytes, None]:
    """New exchanges matching the list's filters (and the rows of those in flight, as they
    change), each ``{"id", "html"}``: the row the list shows. ``current``: the store's reads,
    None while there is no store yet (a recorder has not created it)."""
    yield b"retry: 2000\n\n"
    seen: dict[int, tuple[Any, ...]] = {}
    while True:
        poll = functools.partial(_poll, current, view, after, watch, seen)
        rows = await anyio.to_thread.run_sync(poll, limiter=poll_threads())
        for x_id, html in rows:
            after = max(after, x_id)
            yield _message(b"exchange", after, {"id": x_id, "html": html})
        if not rows:
            yield _IDLE
        await anyio.sleep(POLL_S)


def _poll(
    current: Callable[[], Queries | None], view: ListView, after: int, watch: set[int],
    seen: dict[int, tuple[Any, ...]],
) -> list[tuple[int, str]]:  # fmt: skip
    """The rows to send: those in flight whose row changed, then new exchanges."""
    queries = current()
    if queries is None:
        return []
    reads = PageReads(queries.store)
    new = reads.list_rows_after(after, view.filters, limit=_NEW_MAX)
    old = [x for x in reads.list_rows_by_id(sorted(watch)) if x.id <= after]
    changed: list[ListRow] = []
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
    found = view.matches(queries, [x.id for x in changed])
    return [(x.id, row_html(x, counts.get(x.id, 0), found.get(x.id))) for x in changed]


async def events_stream(
    queries: Queries, exchange_id: int, after: int, offset: int | None, start: int = -1
) -> AsyncGenerator[bytes, None]:
    """What the page of a stream in flight needs to follow it to its end.

    ``output`` first: the text so far, ``{"text"}``. Then the events stored after seq
    ``after``, each ``{"seq", "html", "text"}``: its row of the events table and what it added
    to the output; ``exchange`` whenever the exchange's figures change, ``{"state", "facts",
    "findings", "response", "count", "output"}`` (rendered parts of the page; ``output``, the
    analyzed text, once it is over); then ``done`` once it is over and all is sent. ``start``:
    the seq before the page's first event (a finding's link on the page or to another page).
    """
    yield b"retry: 2000\n\n"
    reads = PageReads(queries.store)
    x = await _in_thread(reads.exchange, exchange_id)
    if x is None:
        yield _message(b"done", after, {"state": None})
        return
    text = _LiveText(x)
    if x.state == ExchangeState.RECORDING:
        seed = await _in_thread(text.seed, queries, exchange_id, after)
        yield _message(b"output", after, {"text": seed})
    look: tuple[Any, ...] | None = None
    while True:
        # The state first: events stored before it changed are all read below.
        x = await _in_thread(reads.exchange, exchange_id)
        events = await _in_thread(
            queries.events_page, exchange_id, after_seq=after, limit=EVENTS_PER_PAGE
        )
        for e, html in zip(events, event_rows(exchange_id, events, offset), strict=True):
            after, offset = e.seq, e.offset_us
            piece = text.piece(e.seq, e.event, e.data)
            yield _message(b"event", after, {"seq": e.seq, "html": html, "text": piece})
        over = x is None or (x.state != ExchangeState.RECORDING and len(events) < EVENTS_PER_PAGE)
        if x is not None and (over or _look(x) != look):
            # The response part once the status changes (re-rendered, an opened body closes).
            response = over or look is None or look[3] != x.status
            look = _look(x)
            parts = await _in_thread(_parts, queries, x, start, over, response)
            yield _message(b"exchange", after, parts)
        if over:
            yield _message(b"done", after, {"state": None if x is None else x.state})
            return
        if not events:
            yield _IDLE
        await anyio.sleep(POLL_S)


async def _in_thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` on one of the live streams' threads."""
    return await anyio.to_thread.run_sync(
        functools.partial(fn, *args, **kwargs), limiter=poll_threads()
    )


def _look(x: Exchange) -> tuple[Any, ...]:
    """What changes on an exchange page as the stream goes on."""
    return (
        x.state, x.event_count, x.outcome, x.status, x.duration_us, x.ttfb_us, x.ttft_us,
        x.output_tokens,
    )  # fmt: skip


def _parts(
    queries: Queries, x: Exchange, start: int, over: bool, response: bool
) -> dict[str, object]:
    """The parts of the exchange's page that change, rendered (escaped) as on the page."""
    view = ExchangePage(x, queries, after=start)
    findings = queries.findings(x.id)
    # The live page shows every event after its start (its table grows with the stream).
    shown = {f.event_seq for f in findings if f.event_seq is not None and f.event_seq > start}
    return {
        "state": x.state,
        "facts": view.facts(),
        "findings": view.findings(findings, shown),
        "response": view.response() if response else None,
        "count": x.event_count,
        # The analyzed text replaces the one grown from the events (which it may tidy).
        "output": cut(x.output_text or "") if over else None,
    }


class _LiveText:
    """The output text grown from the events, as a page shows it: cut at TEXT_SHOWN."""

    def __init__(self, x: Exchange) -> None:
        self.reader = Playback(x)
        self.left = TEXT_SHOWN

    def seed(self, queries: Queries, exchange_id: int, upto: int) -> str:
        """The text of the events up to seq ``upto`` (those the page already shows)."""
        out = []
        for t in queries.timings(exchange_id):
            if t.seq > upto or self.left <= 0:
                break
            out.append(self.piece(t.seq, t.event, t.data))
        return "".join(out)

    def piece(self, seq: int, event: str | None, data: str | None) -> str:
        if self.left <= 0:
            return ""
        piece = self.reader.piece(seq, event, data)[: self.left]
        self.left -= len(piece)
        return piece
