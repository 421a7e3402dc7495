"""What `ssetape stats` shows of a group, summed by the database: one row per group.

On PostgreSQL the server adds up the group and takes its percentiles (``percentile_cont``:
the same linear interpolation as ``analysis.stats.percentile``), so a day of 33,000 exchanges
costs one row per group over the wire instead of 33,000 rows added up in Python (0.25 s). SQLite
has no percentile function: ``analysis.stats`` adds its rows up itself (``Queries.stat_rows``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

from sqlalchemy import Float, String, and_, case, cast, func, null, or_, select

from ssetape.storage.filters import ExchangeFilter, counted_fault_column, failed_clause
from ssetape.storage.models import Exchange
from ssetape.storage.narrowing import Narrowing
from ssetape.vocabulary import Fault

__all__ = ["StatTotals"]

_NAMES = [f.value for f in Fault]  # a column of failures each
_N = len(_NAMES)


class StatTotals(NamedTuple):
    """One group's counts, sums and percentiles (None where no exchange had the value)."""

    group: Any
    exchanges: int
    # The failed ones (vocabulary.is_failed: what `--outcome failed` lists) by the fault they
    # count under (vocabulary.counted_fault), every Fault a key.
    faults: dict[str, int]
    ttfb_p50: float | None
    ttfb_p95: float | None
    ttft_p50: float | None
    ttft_p95: float | None
    tokens_per_s_p50: float | None
    ttft_sum: float | None
    input_tokens: int
    output_tokens: int
    usage_reported: int
    cost_nusd: int
    priced: int

    def failed(self, faults: frozenset[str]) -> int:
        """The failed exchanges whose fault is one of ``faults`` (vocabulary.faults_of)."""
        return sum(n for fault, n in self.faults.items() if fault in faults)

    @classmethod
    def read(cls, narrowing: Narrowing, key: Any, filters: ExchangeFilter) -> Iterator[StatTotals]:
        """The groups of ``key`` (None: one group of all) among what ``filters`` match; no
        row when nothing matches."""
        x = Exchange
        error, fault = failed_clause(), counted_fault_column()

        def pct(q: float, col: Any) -> Any:
            return func.percentile_cont(q).within_group(cast(col, Float))

        # Grouped by the name stats shows (analysis.stats adds up SQLite's rows by name):
        # NULL is "-", so a group of NULLs and one of a literal "-" are one group either way.
        name = null() if key is None else func.coalesce(cast(key, String), "-")
        stmt = select(
            name,
            func.count(),
            *(func.count(case((and_(error, fault == f.value), 1))) for f in Fault),
            pct(0.5, x.ttfb_us),
            pct(0.95, x.ttfb_us),
            pct(0.5, x.ttft_us),
            pct(0.95, x.ttft_us),
            pct(0.5, x.tokens_per_s),
            func.sum(x.ttft_us),
            func.coalesce(func.sum(x.input_tokens), 0),
            func.coalesce(func.sum(x.output_tokens), 0),
            func.count(case((or_(x.input_tokens.is_not(None), x.output_tokens.is_not(None)), 1))),
            func.coalesce(func.sum(x.cost_nusd), 0),
            func.count(x.cost_nusd),
        ).select_from(x)
        if key is not None:
            stmt = stmt.group_by(name)
        stmt = narrowing.apply(stmt, filters)
        with narrowing.store.engine.connect() as conn:
            for typed in conn.execute(stmt):
                row: tuple[Any, ...] = tuple(typed)
                if not row[1]:
                    continue  # no group by: one row, of nothing
                faults = dict(zip(_NAMES, map(int, row[2 : 2 + _N]), strict=True))
                rest = row[2 + _N :]
                # Sums of bigints come back as numeric (Decimal): exact, made int here.
                yield cls(
                    row[0], int(row[1]), faults, rest[0], rest[1], rest[2], rest[3], rest[4],
                    None if rest[5] is None else float(rest[5]),
                    int(rest[6]), int(rest[7]), int(rest[8]), int(rest[9]), int(rest[10]),
                )  # fmt: skip
