"""What of an analysis the store can hold: a derived number past its column is left unknown.

An upstream may report any usage (``"prompt_tokens": 9223372036854775808``): the count is
stored as unknown (``storage.models.Count``) and so is everything computed from it (the
price, tokens/s), so that one exchange's absurd value costs only itself, never the batch of
exchanges stored with it, nor a `ssetape reindex`.
"""

from __future__ import annotations

import dataclasses
import math

from ssetape.analysis.analyzer import Analysis
from ssetape.storage.models import COUNT_END

__all__ = ["bounded"]

_COUNTS = (
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "web_searches",
)
_TIMES = ("ttft_us", "gap_median_us", "gap_p95_us", "gap_max_us")
_TIME_END = 2**63  # BIGINT


def bounded(a: Analysis) -> tuple[Analysis, str | None]:
    """``a`` with every number its column cannot hold set to None, and what was left out
    (``"input_tokens 9223372036854775808"``) when it was a count, else None."""
    changes: dict[str, object] = {}
    absurd: list[str] = []
    for name in _COUNTS:
        value = getattr(a, name)
        if value is not None and not -COUNT_END <= value < COUNT_END:
            changes[name] = None
            absurd.append(f"{name} {value}"[:60])
    for name in _TIMES:
        value = getattr(a, name)
        if value is not None and not -_TIME_END <= value < _TIME_END:
            changes[name] = None
    rate = a.tokens_per_s
    if rate is not None and ("output_tokens" in changes or not math.isfinite(rate)):
        changes["tokens_per_s"] = None  # a rate from an absurd count is as absurd
    if not changes:
        return a, None
    return dataclasses.replace(a, **changes), ", ".join(absurd) or None  # type: ignore[arg-type]
