"""What `ssetape stats` shows of a group, summed by the database: one row per group.

On PostgreSQL the server adds up the group and takes its percentiles (``percentile_cont``:
the same linear interpolation as ``analysis.stats.percentile``), so a day of 33,000 exchanges
costs one row per group over the wire instead of 33,000 rows added up in Python (0.25 s). SQLite
has no percentile function: ``analysis.stats`` adds its rows up itself (``Queries.stat_rows``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

from sqlalchemy import Float, String, case, cast, func, null, or_, select

from ssetape.storage.filters import ExchangeFilter, failed_clause
from ssetape.storage.models import Exchange
from ssetape.storage.narrowing import Narrowing

__all__ = ["StatTotals"]


class StatTotals(NamedTuple):
    """One group's counts, sums and percentiles (None where no exchange had the value)."""

    group: Any
    exchanges: int
    failed: int  # vocabulary.is_failed: what `--outcome failed` lists
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

    @classmethod
    def read(cls, narrowing: Narrowing, key: Any, filters: ExchangeFilter) -> Iterator[StatTotals]:
        """The groups of ``key`` (None: one group of all) among what ``filters`` match; no
        row when nothing matches."""
        x = Exchange
        error = failed_clause()

        def pct(q: float, col: Any) -> Any:
            return func.percentile_cont(q).within_group(cast(col, Float))

        # Grouped by the name stats shows (analysis.stats adds up SQLite's rows by name):
        # NULL is "-", so a group of NULLs and one of a literal "-" are one group either way.
        name = null() if key is None else func.coalesce(cast(key, String), "-")
        stmt = select(
            name,
            func.count(),
            func.count(case((error, 1))),
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
            for row in conn.execute(stmt):
                if not row[1]:
                    continue  # no group by: one row, of nothing
                # Sums of bigints come back as numeric (Decimal): exact, made int here.
                yield cls(
                    row[0], int(row[1]), int(row[2]), row[3], row[4], row[5], row[6], row[7],
                    None if row[8] is None else float(row[8]),
                    int(row[9]), int(row[10]), int(row[11]), int(row[12]), int(row[13]),
                )  # fmt: skip
