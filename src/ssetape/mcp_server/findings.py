"""Findings across the store: what the analysis flagged (see ssetape.analysis.findings), with
the exchange each belongs to."""

from __future__ import annotations

from typing import Any

from ssetape.mcp_server.paging import PAGE_BYTES, Page, budget_of, cursor_ints, limit_of, since_of
from ssetape.mcp_server.texts import clip
from ssetape.storage.filters import ExchangeFilter
from ssetape.storage.models import Exchange, Finding
from ssetape.storage.queries import Queries
from ssetape.views.documents import url_of

__all__ = ["findings"]


def findings(
    queries: Queries, *, code: str | None = None, since: str | None = None, limit: int = 50,
    cursor: str | None = None, max_bytes: int = PAGE_BYTES,
) -> dict[str, Any]:  # fmt: skip
    n, budget = limit_of(limit), budget_of(max_bytes)
    before = cursor_ints(cursor, 2)
    rows = queries.findings_of(code, ExchangeFilter(since=since_of(since)), limit=n,
                               before=(before[0], before[1]) if before else None)  # fmt: skip
    page = Page.fill(rows, _doc, budget, "finding")
    last = rows[page.rows - 1][0] if page.more(rows, n) else None
    return {"findings": page.docs,
            "next_cursor": f"{last.exchange_id}:{last.n}" if last else None,
            **page.fields()}  # fmt: skip


def _doc(row: tuple[Finding, Exchange]) -> Any:
    f, x = row
    return clip({"exchange_id": x.id, "started_at": x.started_at.isoformat(), "url": url_of(x),
                 "model": x.model, "code": f.code, "event_seq": f.event_seq,
                 "detail": f.detail})  # fmt: skip
