"""`ssetape stats`: counts, error rates, latency percentiles and tokens per group of exchanges."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select

from ssetape.storage.filters import Filters
from ssetape.storage.models import Exchange
from ssetape.storage.store import Store
from ssetape.vocabulary import ERROR_OUTCOMES, ExchangeState

GROUP_BY = {
    "model": Exchange.model,
    "host": Exchange.host,
    "api": Exchange.api,
    "outcome": Exchange.outcome,
    "status": Exchange.status,
}
_TRANSPORT_ERRORS = frozenset(
    (ExchangeState.FAILED, ExchangeState.TRUNCATED, ExchangeState.INTERRUPTED)
)


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in 0..100) of unsorted values; None when empty."""
    if not values:
        return None
    v = sorted(values)
    k = (len(v) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def _ms(us: float | None) -> float | None:
    return None if us is None else round(us / 1000, 3)


def is_error(outcome: str | None, status: int | None, state: str) -> bool:
    if outcome is not None:
        return outcome in ERROR_OUTCOMES
    # Not analysed yet (`ssetape reindex` fills it): judge by transport alone.
    return (status is not None and status >= 400) or state in _TRANSPORT_ERRORS


class _Group:
    def __init__(self, name: str) -> None:
        self.name = name
        self.count = 0
        self.errors = 0
        self.ttfb: list[float] = []
        self.ttft: list[float] = []
        self.tps: list[float] = []
        self.input_tokens = 0
        self.output_tokens = 0
        self.usage_reported = 0

    def json(self) -> dict[str, Any]:
        tps = percentile(self.tps, 50)
        return {
            "group": self.name,
            "count": self.count,
            "errors": self.errors,
            "error_rate": round(self.errors / self.count, 4) if self.count else 0.0,
            "ttfb_ms": {
                "p50": _ms(percentile(self.ttfb, 50)),
                "p95": _ms(percentile(self.ttfb, 95)),
            },
            "ttft_ms": {
                "p50": _ms(percentile(self.ttft, 50)),
                "p95": _ms(percentile(self.ttft, 95)),
            },
            # Sums of what the streams reported; usage_reported says how many did.
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "usage_reported": self.usage_reported,
            "tokens_per_s": {"p50": None if tps is None else round(tps, 2)},
        }


class Stats:
    """Counts, error rates, latency percentiles and tokens of a store's exchanges, grouped."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def groups(self, by: str | None, filters: Filters) -> list[dict[str, Any]]:
        key = GROUP_BY[by] if by else None
        cols = [
            Exchange.outcome,
            Exchange.status,
            Exchange.state,
            Exchange.ttfb_us,
            Exchange.ttft_us,
            Exchange.input_tokens,
            Exchange.output_tokens,
            Exchange.tokens_per_s,
        ]
        stmt = filters.apply(select(key if key is not None else Exchange.id, *cols))
        groups: dict[str, _Group] = {}
        with self._store.Session() as s:
            for row in s.execute(stmt.execution_options(yield_per=10_000)):
                values: tuple[Any, ...] = tuple(row)
                name = "all" if key is None else ("-" if values[0] is None else str(values[0]))
                g = groups.get(name)
                if g is None:
                    g = groups[name] = _Group(name)
                outcome, status, state, ttfb, ttft, tin, tout, tps = values[1:]
                g.count += 1
                g.errors += is_error(outcome, status, state)
                if ttfb is not None:
                    g.ttfb.append(ttfb)
                if ttft is not None:
                    g.ttft.append(ttft)
                if tps is not None:
                    g.tps.append(tps)
                if tin is not None or tout is not None:
                    g.usage_reported += 1
                g.input_tokens += tin or 0
                g.output_tokens += tout or 0
        return [g.json() for g in sorted(groups.values(), key=lambda g: (-g.count, g.name))]
