"""Bounded pages: a limit with a maximum, a budget in bytes, and an opaque cursor naming
where the next starts.

A page is bounded by what it costs an agent's context, not only by its count: it stops
before the item that would take it past its budget (bytes of compact JSON), and always holds
one item, the texts of a huge one cut to fit, with a note saying so.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ssetape.mcp_server.texts import fit, size
from ssetape.storage.filters import parse_since

__all__ = [
    "MAX_LIMIT",
    "MAX_PAGE_BYTES",
    "MIN_PAGE_BYTES",
    "PAGE_BYTES",
    "Page",
    "ToolError",
    "budget_of",
    "cursor_ints",
    "limit_of",
    "since_of",
]

MAX_LIMIT = 100
# A page's budget by default: ~4k tokens, a small share of an agent's context.
PAGE_BYTES = 16_000
MIN_PAGE_BYTES = 1_000
MAX_PAGE_BYTES = 256_000

T = TypeVar("T")


class ToolError(ValueError):
    """A bad argument: the agent gets its one-line message."""


def limit_of(limit: int, maximum: int = MAX_LIMIT) -> int:
    if limit < 1:
        raise ToolError(f"limit must be at least 1, not {limit}")
    return min(limit, maximum)


def budget_of(max_bytes: int) -> int:
    if max_bytes < MIN_PAGE_BYTES:
        raise ToolError(f"max_bytes must be at least {MIN_PAGE_BYTES}, not {max_bytes}")
    return min(max_bytes, MAX_PAGE_BYTES)


@dataclasses.dataclass(frozen=True)
class Page:
    """The documents of the rows that fit a budget, in order, and what they cost."""

    docs: list[Any]
    rows: int  # rows they are (the first ``rows`` of those given)
    bytes: int  # the docs as one JSON array
    note: str | None  # set when the one doc shown alone passed the budget and was cut

    @classmethod
    def fill(cls, rows: Sequence[T], doc: Callable[[T], Any], budget: int, what: str) -> Page:
        """The documents of ``rows`` while they fit in ``budget`` bytes (at least one)."""
        docs: list[Any] = []
        used, note = 2, None  # []
        for row in rows:
            d = doc(row)
            n = size(d) + (1 if docs else 0)  # and a comma
            if used + n > budget:
                if docs:
                    break
                note = (f"the {what} shown is {n} bytes alone, past max_bytes ({budget}): "
                        f"its texts are cut to fit; a larger max_bytes (at most "
                        f"{MAX_PAGE_BYTES}) shows more of them")  # fmt: skip
                d = fit(d, budget - used)
                n = size(d)
            docs.append(d)
            used += n
        return cls(docs, len(docs), used, note)

    def more(self, rows: Sequence[Any], limit: int) -> bool:
        """Whether a next page may hold more: the budget stopped this one, or ``limit`` did."""
        return self.rows < len(rows) or len(rows) == limit

    def fields(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"page_bytes": self.bytes}
        if self.note is not None:
            doc["note"] = self.note
        return doc


def cursor_ints(cursor: str | None, parts: int) -> tuple[int, ...] | None:
    """The ints a cursor given out by a previous page holds (None: the first page)."""
    if not cursor:
        return None
    pieces = cursor.split(":")
    if all(p.isascii() and p.lstrip("-").isdigit() for p in pieces) and any(
        len(p.lstrip("-0")) > 19 for p in pieces
    ):
        # Read before int(): past 4,300 digits Python refuses the number itself.
        raise ToolError(f"cursor {cursor[:40]!r}: past what the store holds")
    try:
        values = tuple(int(p) for p in pieces)
    except ValueError:
        values = ()
    if len(values) != parts:
        raise ToolError(f"cursor {cursor[:40]!r}: pass next_cursor from a previous answer")
    if any(not -(2**63) <= v < 2**63 for v in values):
        raise ToolError(f"cursor {cursor[:40]!r}: past what the store holds")
    return values


def since_of(since: str | None) -> dt.datetime | None:
    if not since:
        return None
    try:
        return parse_since(since)
    except ValueError as e:
        raise ToolError(str(e).replace("--since", "since")) from None
