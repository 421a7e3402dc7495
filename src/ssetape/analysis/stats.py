"""`ssetape stats`: counts, error rates, latency percentiles and tokens per group of exchanges.

A group's ``failed`` and ``failed_rate`` count the failures of one selection of faults (the
provider's unless told otherwise: a model's error rate is its provider's doing); ``faults``
counts its failures by each fault, whatever the selection (docs/FIGURES.md).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from typing import Any

from ssetape.cost.price import usd
from ssetape.storage.filters import ExchangeFilter
from ssetape.storage.queries import GROUP_BY, Queries
from ssetape.storage.stat_totals import StatTotals
from ssetape.storage.store import Store
from ssetape.vocabulary import DEFAULT_FAULT, Fault, counted_fault, faults_of, is_failed

__all__ = ["GROUP_BY", "Stats", "percentile"]


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in 0..100) of unsorted values; None when empty."""
    if not values:
        return None
    v = sorted(values)
    k = q / 100 * (len(v) - 1)  # as PostgreSQL's percentile_cont, to the last bit
    lo, hi = math.floor(k), math.ceil(k)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def _ms(us: float | None) -> float | None:
    return None if us is None else round(us / 1000, 3)


def _name(by: str | None, group: Any) -> str:
    return "all" if by is None else ("-" if group is None else str(group))


class _Group:
    def __init__(self, name: str) -> None:
        self.name = name
        self.count = 0
        self.faults = dict.fromkeys((f.value for f in Fault), 0)
        self.ttfb: list[float] = []
        self.ttft: list[float] = []
        self.tps: list[float] = []
        self.input_tokens = 0
        self.output_tokens = 0
        self.usage_reported = 0
        self.cost_nusd = 0
        self.priced = 0

    def totals(self) -> StatTotals:
        return StatTotals(
            self.name, self.count, self.faults,
            percentile(self.ttfb, 50), percentile(self.ttfb, 95),
            percentile(self.ttft, 50), percentile(self.ttft, 95),
            percentile(self.tps, 50), sum(self.ttft) if self.ttft else None,
            self.input_tokens, self.output_tokens, self.usage_reported,
            self.cost_nusd, self.priced,
        )  # fmt: skip


def _doc(name: str, t: StatTotals, fault: str) -> dict[str, Any]:
    tps = t.tokens_per_s_p50
    failed = t.failed(faults_of(fault))
    return {
        "group": name,
        "count": t.exchanges,
        # Exchanges whose outcome is failed (vocabulary.is_failed) by the faults ``fault``
        # selects: what `list --outcome failed --fault FAULT` lists.
        "failed": failed,
        "failed_rate": round(failed / t.exchanges, 4) if t.exchanges else 0.0,
        "failed_fault": fault,
        # Every failure, by whose it was (vocabulary.Fault), whatever ``fault`` selects.
        "faults": dict(t.faults),
        "ttfb_ms": {"p50": _ms(t.ttfb_p50), "p95": _ms(t.ttfb_p95)},
        "ttft_ms": {"p50": _ms(t.ttft_p50), "p95": _ms(t.ttft_p95)},
        # Sums of what the streams reported; usage_reported says how many did.
        "input_tokens": t.input_tokens,
        "output_tokens": t.output_tokens,
        "usage_reported": t.usage_reported,
        "tokens_per_s": {"p50": None if tps is None else round(tps, 2)},
        # The sum over the priced exchanges (exact, in nano-dollars); None when none
        # was priced, never 0. ``unpriced``: how many the sum leaves out.
        "cost_usd": usd(t.cost_nusd) if t.priced else None,
        "cost_nusd": t.cost_nusd if t.priced else None,
        "priced": t.priced,
        "unpriced": t.exchanges - t.priced,
    }


class Stats:
    """Counts, failure rates, latency percentiles and tokens of a store's exchanges, grouped."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def groups(
        self, by: str | None, filters: ExchangeFilter, fault: str = DEFAULT_FAULT
    ) -> list[dict[str, Any]]:
        """The groups' figures, most exchanges first; ``failed`` counts the failures of
        ``fault`` (a Fault, or "any"; ValueError naming the choices otherwise)."""
        faults_of(fault)
        queries = Queries(self._store)
        if self._store.is_sqlite:
            totals = self._added_up(queries, by, filters)
        else:  # the server adds up and takes the percentiles: a row per group
            totals = {_name(by, t.group): t for t in queries.stat_totals(by, filters)}
        ordered = sorted(totals.items(), key=lambda kv: (-kv[1].exchanges, kv[0]))
        out = [_doc(name, t, str(fault)) for name, t in ordered]
        if by == "session":
            walls = self._wall_us(filters)
            for (name, t), doc in zip(ordered, out, strict=True):
                # The time its calls spent waiting for their first tokens: calls may
                # overlap, so it can be more than the wall time.
                doc["ttft_total_ms"] = _ms(t.ttft_sum or 0)
                doc["wall_ms"] = _ms(walls.get(name))
        return out

    @staticmethod
    def _added_up(
        queries: Queries, by: str | None, filters: ExchangeFilter
    ) -> dict[str, StatTotals]:
        """SQLite, which has no percentile function: each exchange's row, added up here."""
        groups: dict[str, _Group] = {}
        of: dict[Any, _Group] = {}  # by the group's value: one name made per group
        rows = queries.stat_rows(by, filters)
        # Unpacked, not read by name: tens of thousands of rows a day.
        for group, outcome, status, state, fault, ttfb, ttft, tin, tout, tps, cost in rows:
            g = of.get(group)
            if g is None:
                name = _name(by, group)
                g = of[group] = groups.get(name) or groups.setdefault(name, _Group(name))
            g.count += 1
            if is_failed(outcome, status, state):
                whose = counted_fault(fault, state)
                if whose in g.faults:  # as the database counts: a value of the vocabulary
                    g.faults[whose] += 1
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
            if cost is not None:
                g.priced += 1
                g.cost_nusd += cost
        return {name: g.totals() for name, g in groups.items()}

    def _wall_us(self, filters: ExchangeFilter) -> dict[str, float]:
        """Each session's wall time: its first call's start to its last call's end (a call
        without a response yet ends at its start)."""
        spans: dict[str, tuple[dt.datetime, dt.datetime]] = {}
        for row in Queries(self._store).span_rows("session", filters):
            name = "-" if row.group is None else str(row.group)
            end = row.started_at + dt.timedelta(microseconds=row.duration_us or 0)
            first, last = spans.get(name, (row.started_at, end))
            spans[name] = (min(first, row.started_at), max(last, end))
        one_us = dt.timedelta(microseconds=1)
        return {name: (last - first) / one_us for name, (first, last) in spans.items()}
