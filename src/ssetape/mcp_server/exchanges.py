"""Exchanges for an agent: a page of summaries, and one exchange in detail with its events."""

from __future__ import annotations

from typing import Any

from ssetape.mcp_server import texts
from ssetape.mcp_server.paging import ToolError, cursor_ints, limit_of, since_of
from ssetape.mcp_server.texts import clip
from ssetape.storage.filters import ExchangeFilter
from ssetape.storage.models import Event, Exchange
from ssetape.storage.queries import Queries
from ssetape.views.documents import knowledge, summary

__all__ = ["EVENTS_MAX", "event_doc", "get_exchange", "list_exchanges", "lookup"]

EVENTS_MAX = 200
# Characters of one event's data handed out.
EVENT_TEXT = 1000
_LONG_TEXTS = ("output_text", "refusal_text", "reasoning_text")


def lookup(queries: Queries, id_or_uid: str | int) -> Exchange:
    key = id_or_uid.strip() if isinstance(id_or_uid, str) else id_or_uid
    x = queries.exchange(key) if key != "" else None
    if x is None:
        raise ToolError(f"no exchange {str(id_or_uid)[:40]!r} in this store")
    return x


def list_exchanges(
    queries: Queries, *, api: str | None = None, model: str | None = None,
    outcome: str | None = None, host: str | None = None, since: str | None = None,
    text: str | None = None, limit: int = 20, cursor: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    filters = ExchangeFilter(api=api, model=model, outcome=outcome, host=host,
                             since=since_of(since), text=text)  # fmt: skip
    n = limit_of(limit)
    before = cursor_ints(cursor, 1)
    rows = queries.exchanges(filters, limit=n, before=before[0] if before else None)
    counts = queries.finding_counts([x.id for x in rows])
    docs = [{**clip(summary(x)), "findings": counts.get(x.id, 0)} for x in rows]
    return {"exchanges": docs, "next_cursor": str(rows[-1].id) if len(rows) == n else None}


def event_doc(e: Event) -> dict[str, Any]:
    return {"seq": e.seq, "offset_ms": round(e.offset_us / 1000, 3), "event": clip(e.event),
            "data": texts.text(e.data, EVENT_TEXT)}  # fmt: skip


def _knowledge(x: Exchange, queries: Queries) -> dict[str, Any]:
    doc = knowledge(x, queries.findings(x.id))
    for name in _LONG_TEXTS:
        doc[name] = texts.text(doc[name])
    return {k: v if k in _LONG_TEXTS else clip(v) for k, v in doc.items()}


def get_exchange(
    queries: Queries, id: str, *, events: bool = False, after_seq: int = -1, limit: int = 50
) -> dict[str, Any]:
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
        n = limit_of(limit, EVENTS_MAX)
        page = queries.events_page(x.id, after_seq=after_seq, limit=n)
        doc["events"] = [event_doc(e) for e in page]
        doc["events_next_after_seq"] = page[-1].seq if len(page) == n else None
    return doc
