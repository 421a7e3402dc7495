"""Exchanges for an agent: a page of summaries, and one exchange in detail with its events."""

from __future__ import annotations

from typing import Any

from ssetape.mcp_server import texts
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
from ssetape.storage.filters import ExchangeFilter
from ssetape.storage.models import Event, Exchange
from ssetape.storage.queries import Queries
from ssetape.views.documents import knowledge, summary
from ssetape.vocabulary import outcome_choices, parse_outcome

__all__ = [
    "EVENTS_MAX",
    "OUTCOMES",
    "event_doc",
    "get_exchange",
    "list_exchanges",
    "lookup",
    "outcome_of",
]

EVENTS_MAX = 200
# What an outcome filter takes: every outcome, then "failed" (all those counted as failed).
OUTCOMES = tuple(outcome_choices())
# Characters of one event's data handed out.
EVENT_TEXT = 1000
_LONG_TEXTS = ("output_text", "refusal_text", "reasoning_text")


def lookup(queries: Queries, id_or_uid: str | int) -> Exchange:
    """The exchange an agent names as any tool gave it: its id (a number, or the string of
    one, as tools took it before) or its uid."""
    key = id_or_uid.strip() if isinstance(id_or_uid, str) else id_or_uid
    # An int the store cannot hold names nothing (PostgreSQL would refuse it).
    valid = 0 < key < 2**63 if isinstance(key, int) else key != ""
    x = queries.exchange(key) if valid else None
    if x is None:
        raise ToolError(f"no exchange {str(id_or_uid)[:40]!r} in this store")
    return x


def outcome_of(outcome: str | None) -> str | None:
    """``outcome`` if a filter takes it (the tools' schemas list the choices; this names them
    to a client that sends another anyway, rather than answer with nothing found)."""
    if outcome is None:
        return None
    try:
        return parse_outcome(outcome)
    except ValueError as e:
        raise ToolError(str(e)) from None


def list_exchanges(
    queries: Queries, *, api: str | None = None, model: str | None = None,
    outcome: str | None = None, host: str | None = None, since: str | None = None,
    text: str | None = None, limit: int = 20, cursor: str | None = None,
    max_bytes: int = PAGE_BYTES,
) -> dict[str, Any]:  # fmt: skip
    filters = ExchangeFilter(api=api, model=model, outcome=outcome_of(outcome), host=host,
                             since=since_of(since), text=text)  # fmt: skip
    n, budget = limit_of(limit), budget_of(max_bytes)
    before = cursor_ints(cursor, 1)
    rows = queries.exchanges(filters, limit=n, before=before[0] if before else None)
    counts = queries.finding_counts([x.id for x in rows])
    page = Page.fill(rows, lambda x: {**clip(summary(x)), "findings": counts.get(x.id, 0)},
                     budget, "exchange")  # fmt: skip
    last = rows[page.rows - 1] if page.more(rows, n) else None
    return {"exchanges": page.docs, "next_cursor": str(last.id) if last else None,
            **page.fields()}  # fmt: skip


def event_doc(e: Event) -> dict[str, Any]:
    return {"seq": e.seq, "offset_ms": round(e.offset_us / 1000, 3), "event": clip(e.event),
            "data": texts.text(e.data, EVENT_TEXT)}  # fmt: skip


def _knowledge(x: Exchange, queries: Queries) -> dict[str, Any]:
    doc = knowledge(x, queries.findings(x.id))
    for name in _LONG_TEXTS:
        doc[name] = texts.text(doc[name])
    return {k: v if k in _LONG_TEXTS else clip(v) for k, v in doc.items()}


def get_exchange(
    queries: Queries, id: str | int, *, events: bool = False, after_seq: int = -1,
    limit: int = 50, max_bytes: int = PAGE_BYTES,
) -> dict[str, Any]:  # fmt: skip
    x = lookup(queries, id)
    doc: dict[str, Any] = {
        "exchange": clip(summary(x)),
        "request": {
            "headers": clip(x.request_headers or []),
            "body": texts.text(x.request_body),
        },
        "response": {
            "status": x.status,
            "reason": clip(x.reason),
            "headers": clip(x.response_headers or []),
            # A stream's body is its events.
            "body": texts.text(x.response_body),
        },
        "analysis": _knowledge(x, queries),
    }
    if events:
        n, budget = limit_of(limit, EVENTS_MAX), budget_of(max_bytes)
        rows = queries.events_page(x.id, after_seq=after_seq, limit=n)
        page = Page.fill(rows, event_doc, budget, "event")
        doc["events"] = page.docs
        doc["events_next_after_seq"] = rows[page.rows - 1].seq if page.more(rows, n) else None
        doc["events_page_bytes"] = page.bytes
        if page.note is not None:
            doc["events_note"] = page.note
    return doc
