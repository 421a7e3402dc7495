"""Two exchanges side by side: what their requests differ in, and how their timing compares."""

from __future__ import annotations

from typing import Any

from ssetape.mcp_server.exchanges import lookup
from ssetape.mcp_server.texts import clip
from ssetape.storage.models import Exchange
from ssetape.storage.queries import Queries
from ssetape.web.request_diff import differences

__all__ = ["DIFF_SHOWN", "compare"]

DIFF_SHOWN = 100


def _ms(us: int | None) -> float | None:
    return None if us is None else round(us / 1000, 3)


def _timing(x: Exchange) -> Any:
    return clip({
        "id": x.id, "model": x.model, "status": x.status, "state": x.state,
        "outcome": x.outcome, "ttfb_ms": _ms(x.ttfb_us), "ttft_ms": _ms(x.ttft_us),
        "duration_ms": _ms(x.duration_us), "event_count": x.event_count,
        "gap_p95_ms": _ms(x.gap_p95_us), "gap_max_ms": _ms(x.gap_max_us),
        "tokens_per_s": x.tokens_per_s, "input_tokens": x.input_tokens,
        "output_tokens": x.output_tokens,
    })  # fmt: skip


def compare(queries: Queries, a: str | int, b: str | int) -> dict[str, Any]:
    xa, xb = lookup(queries, a), lookup(queries, b)
    rows, cut = differences(xa, xb)
    diff = [{"where": w, "what": k, "a": va, "b": vb} for w, k, va, vb in rows[:DIFF_SHOWN]]
    return {
        "request_diff": clip(diff),
        "request_diff_truncated": cut or len(rows) > DIFF_SHOWN,
        "timing": {"a": _timing(xa), "b": _timing(xb)},
    }
