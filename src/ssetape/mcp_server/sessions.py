"""Sessions for an agent: each session's totals, and one session's calls on its time axis.

A session is the calls sharing an x-ssetape-session name (`record --session`, the pytest
plugin's node ids). What :class:`ssetape.storage.session_queries.SessionQueries` sums and
pages, as bounded JSON documents: names are recorded text, so they go out as clipped data.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
from typing import Any

import orjson

from ssetape.cost.price import usd
from ssetape.mcp_server.paging import (
    PAGE_BYTES,
    Page,
    ToolError,
    budget_of,
    cursor_ints,
    limit_of,
    since_of,
)
from ssetape.mcp_server.texts import clip
from ssetape.storage.queries import Queries
from ssetape.storage.session_queries import (
    SessionCall,
    SessionQueries,
    SessionTotals,
    WindowFilter,
)

__all__ = ["CALLS_MAX", "session", "sessions", "until_of", "window"]

CALLS_MAX = 200
_ONE_US = dt.timedelta(microseconds=1)


def _ms(us: int | None) -> float | None:
    return None if us is None else round(us / 1000, 3)


def until_of(until: str | None) -> dt.datetime | None:
    """``until`` as ``since`` reads it (30m ago, or a date), said as ``until`` when wrong."""
    try:
        return since_of(until)
    except ToolError as e:
        raise ToolError(str(e).replace("since", "until", 1)) from None


def window(since: str | None, until: str | None) -> WindowFilter:
    """The exchanges started at or after ``since`` and before ``until``."""
    return WindowFilter(since=since_of(since), until=until_of(until))


def _totals(t: SessionTotals) -> dict[str, Any]:
    doc: dict[str, Any] = clip({
        "session": t.name, "calls": t.calls, "failed": t.failed,
        "input_tokens": t.input_tokens, "output_tokens": t.output_tokens,
        "usage_reported": t.usage_reported, "wall_ms": _ms(t.wall_us),
        "ttft_total_ms": _ms(t.ttft_total_us), "first_start": t.first_start.isoformat(),
        "last_start": t.last_start.isoformat(),
        # Over the priced calls; null (never 0) when none has a price.
        "cost_usd": usd(t.cost_nusd), "cost_nusd": t.cost_nusd, "priced": t.priced,
        "unpriced": t.calls - t.priced,
    })  # fmt: skip
    return doc


def _cursor(t: SessionTotals) -> str:
    """Where the next page starts (after this session): opaque, as the agent passes it back;
    base64, so no recorded name reads as text in it."""
    key = orjson.dumps([t.last_start.isoformat(), t.name])
    return base64.urlsafe_b64encode(key).decode()


def _after(cursor: str | None) -> tuple[dt.datetime, str] | None:
    if not cursor:
        return None
    try:
        at, name = orjson.loads(base64.urlsafe_b64decode(cursor.encode()))
        return dt.datetime.fromisoformat(at), str(name)
    except (binascii.Error, orjson.JSONDecodeError, TypeError, ValueError, UnicodeError):
        raise ToolError(
            f"cursor {cursor[:40]!r}: pass next_cursor from a previous answer"
        ) from None


def sessions(
    queries: Queries, *, since: str | None = None, until: str | None = None, limit: int = 20,
    cursor: str | None = None, max_bytes: int = PAGE_BYTES,
) -> dict[str, Any]:  # fmt: skip
    n, budget = limit_of(limit), budget_of(max_bytes)
    rows = SessionQueries(queries.store).sessions(window(since, until), limit=n,
                                                  before=_after(cursor))  # fmt: skip
    page = Page.fill(rows, _totals, budget, "session")
    return {"sessions": page.docs,
            "next_cursor": _cursor(rows[page.rows - 1]) if page.more(rows, n) else None,
            **page.fields()}  # fmt: skip


def _call(c: SessionCall, first: dt.datetime) -> dict[str, Any]:
    doc: dict[str, Any] = clip({
        "id": c.id, "started_at": c.started_at.isoformat(),
        "offset_ms": _ms((c.started_at - first) // _ONE_US),
        "ttfb_ms": _ms(c.ttfb_us), "ttft_ms": _ms(c.ttft_us), "duration_ms": _ms(c.duration_us),
        "status": c.status, "state": c.state, "outcome": c.outcome, "failed": c.failed,
        "api": c.api, "model": c.model, "input_tokens": c.input_tokens,
        "output_tokens": c.output_tokens, "cost_usd": usd(c.cost_nusd),
    })  # fmt: skip
    return doc


def session(
    queries: Queries, id: str, *, limit: int = 50, cursor: str | None = None,
    max_bytes: int = PAGE_BYTES,
) -> dict[str, Any]:  # fmt: skip
    reads = SessionQueries(queries.store)
    totals = reads.totals(id)
    if totals is None:
        raise ToolError(f"no session {id[:40]!r} in this store")
    n, budget = limit_of(limit, CALLS_MAX), budget_of(max_bytes)
    after = cursor_ints(cursor, 1)
    calls = reads.calls(id, limit=n, after=after[0] if after else None)
    page = Page.fill(calls, lambda c: _call(c, totals.first_start), budget, "call")
    return {
        "totals": _totals(totals),
        "calls": page.docs,
        "next_cursor": str(calls[page.rows - 1].id) if page.more(calls, n) else None,
        **page.fields(),
    }
