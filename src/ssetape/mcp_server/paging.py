"""Bounded pages: a limit with a maximum, and an opaque cursor naming where the next starts."""

from __future__ import annotations

import datetime as dt

from ssetape.storage.filters import parse_since

__all__ = ["MAX_LIMIT", "ToolError", "cursor_ints", "limit_of", "since_of"]

MAX_LIMIT = 100


class ToolError(ValueError):
    """A bad argument: the agent gets its one-line message."""


def limit_of(limit: int, maximum: int = MAX_LIMIT) -> int:
    if limit < 1:
        raise ToolError(f"limit must be at least 1, not {limit}")
    return min(limit, maximum)


def cursor_ints(cursor: str | None, parts: int) -> tuple[int, ...] | None:
    """The ints a cursor given out by a previous page holds (None: the first page)."""
    if not cursor:
        return None
    try:
        values = tuple(int(p) for p in cursor.split(":"))
    except ValueError:
        values = ()
    if len(values) != parts:
        raise ToolError(f"cursor {cursor[:40]!r}: pass next_cursor from a previous answer")
    return values


def since_of(since: str | None) -> dt.datetime | None:
    if not since:
        return None
    try:
        return parse_since(since)
    except ValueError as e:
        raise ToolError(str(e).replace("--since", "since")) from None
