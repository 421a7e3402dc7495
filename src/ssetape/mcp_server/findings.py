"""Findings across the store: what the analysis flagged (see ssetape.analysis.findings), with
the exchange each belongs to."""

from __future__ import annotations

from typing import Any

from ssetape.mcp_server.paging import cursor_ints, limit_of, since_of
from ssetape.mcp_server.texts import clip
from ssetape.storage.filters import ExchangeFilter
from ssetape.storage.queries import Queries
from ssetape.views.documents import url_of

__all__ = ["findings"]


def findings(
    queries: Queries, *, code: str | None = None, since: str | None = None, limit: int = 50,
    cursor: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    n = limit_of(limit)
    before = cursor_ints(cursor, 2)
    rows = queries.findings_of(code, ExchangeFilter(since=since_of(since)), limit=n,
                               before=(before[0], before[1]) if before else None)  # fmt: skip
    docs = [
        clip({"exchange_id": x.id, "started_at": x.started_at.isoformat(), "url": url_of(x),
              "model": x.model, "code": f.code, "event_seq": f.event_seq, "detail": f.detail})
        for f, x in rows
    ]  # fmt: skip
    last = rows[-1][0] if len(rows) == n else None
    return {"findings": docs, "next_cursor": f"{last.exchange_id}:{last.n}" if last else None}
