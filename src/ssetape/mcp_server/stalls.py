"""Pauses inside streams: which exchanges stalled (their longest gap says), where, and the
events on either side of each pause."""

from __future__ import annotations

import heapq
from typing import Any

from ssetape.analysis.content_events import ContentEvents
from ssetape.mcp_server.exchanges import event_doc
from ssetape.mcp_server.paging import (
    PAGE_BYTES,
    Page,
    budget_of,
    cursor_ints,
    limit_of,
    since_of,
)
from ssetape.mcp_server.texts import clip
from ssetape.storage.filters import ExchangeFilter
from ssetape.storage.models import Exchange
from ssetape.storage.queries import Queries
from ssetape.views.documents import summary

__all__ = ["find_stalls"]

# Exchanges a page looks into (each is read event by event), pauses told per exchange, and
# events shown on each side of a pause.
STALLED_MAX = 20
PAUSES_SHOWN = 3
AROUND = 2


Pause = tuple[int, int, int]  # (gap in us, seq before it, seq after it)


def _pauses(queries: Queries, x: Exchange, min_gap_us: int) -> tuple[int, list[Pause]]:
    """How many pauses of at least ``min_gap_us`` the stream has, and the longest few, by
    seq. A pause is a gap between content events (analysis.content_events), as the stored
    ``gap_max_us`` that found the exchange: keep-alives inside it do not cut it short."""
    count, longest = 0, list[Pause]()
    # A session's pauses are within its turns: the silence between two is not a stall.
    for gap in ContentEvents.stored_gaps(queries, x):
        if gap.us >= min_gap_us:
            count += 1
            heapq.heappush(longest, (gap.us, gap.before_seq, gap.seq))
            if len(longest) > PAUSES_SHOWN:
                heapq.heappop(longest)
    return count, sorted(longest, key=lambda p: p[2])


def find_stalls(
    queries: Queries, *, min_gap_ms: float = 1000, since: str | None = None, limit: int = 10,
    cursor: str | None = None, max_bytes: int = PAGE_BYTES,
) -> dict[str, Any]:  # fmt: skip
    n = limit_of(limit, STALLED_MAX)
    budget = budget_of(max_bytes)
    min_gap_us = max(1, round(min_gap_ms * 1000))
    before = cursor_ints(cursor, 1)
    rows = queries.stalled(min_gap_us, ExchangeFilter(since=since_of(since)), limit=n,
                           before=before[0] if before else None)  # fmt: skip
    # Each exchange is read only when its stall is shown: a page stops at its budget.
    page = Page.fill(rows, lambda x: _stall(queries, x, min_gap_us), budget, "stall")
    last = rows[page.rows - 1].id if page.rows else None
    more = page.more(rows, n) and last is not None
    return {"stalls": page.docs, "next_cursor": str(last) if more else None, **page.fields()}


def _stall(queries: Queries, x: Exchange, min_gap_us: int) -> dict[str, Any]:
    count, longest = _pauses(queries, x, min_gap_us)
    pauses = []
    for gap_us, prev, seq in longest:
        # The content event that began the pause and the one before it; the first ones
        # after it. Keep-alives inside the pause are counted, not shown.
        before_it = queries.events_page(x.id, after_seq=prev - AROUND, stop_seq=prev + 1)
        after_it = queries.events_page(x.id, after_seq=seq - 1, limit=AROUND)
        pauses.append({
            "gap_ms": round(gap_us / 1000, 3),
            "between_seqs": [prev, seq],
            "events_inside": seq - prev - 1,
            "events_before": [event_doc(e) for e in before_it[-AROUND:]],
            "events_after": [event_doc(e) for e in after_it],
        })  # fmt: skip
    gap_max_ms = round((x.gap_max_us or 0) / 1000, 3)
    return {"exchange": clip(summary(x)), "gap_max_ms": gap_max_ms, "pauses_found": count,
            "pauses": pauses}  # fmt: skip
