"""What a cassette's values may be, beyond their column's type: the store's invariants.

A cassette is input from anywhere (a pull request, a colleague, an attacker). The codec checks
each value's type; these check what the rest of ssetape relies on, before anything is written:
headers are ``[name, value]`` string pairs that are HTTP header lines (an injected CR LF
would split the replayed response), states and outcomes come from their vocabularies,
times are within a day, JSON is not nested deeper than anything ssetape writes, integers fit
the store. Each check returns what is wrong in a few words, or None.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ssetape.analysis.apis import api_names
from ssetape.http_fields import reason_problem, unsafe_fields
from ssetape.vocabulary import Direction, ExchangeState, Opcode, Outcome, Transport

__all__ = ["CONSTRAINTS", "MAX_DEPTH", "MAX_HEADERS", "MAX_US", "check"]

MAX_US = 24 * 3600 * 1_000_000  # a day: no recorded stream lasts longer
MAX_DEPTH = 16  # of JSON values ssetape writes (details: tool calls in a dict in a list)
# Per list: no server sends more, and each pair is a few Python objects (~200 bytes) for a
# few bytes of line, so the count, not the line's size, bounds what an import holds.
MAX_HEADERS = 10_000
_INT64 = 2**63 - 1

Check = Callable[[Any], str | None]


def _headers(value: Any) -> str | None:
    if not isinstance(value, list):
        return "must be a list of [name, value] pairs"
    if len(value) > MAX_HEADERS:
        return f"has {len(value)} headers, more than {MAX_HEADERS}"
    for pair in value:
        if not (
            isinstance(pair, list)
            and len(pair) == 2
            and isinstance(pair[0], str)
            and isinstance(pair[1], str)
        ):
            return "must be a list of [name, value] pairs of strings"
    bad = unsafe_fields(value)
    if bad:
        index, wrong = bad[0]
        return f"pair #{index + 1}: {wrong}"
    return None


def _one_of(names: list[str]) -> Check:
    def check(value: Any) -> str | None:
        return None if value in names else f"must be one of {', '.join(names)}"

    return check


def _within(low: int, high: int) -> Check:
    def check(value: Any) -> str | None:
        return None if low <= value <= high else f"must be between {low} and {high}"

    return check


def _depth(value: Any, limit: int = MAX_DEPTH) -> str | None:
    """Iterative, so a value nested a million deep costs no recursion."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return f"is nested deeper than {limit}"
        if isinstance(node, dict):
            stack += [(v, depth + 1) for v in node.values()]
        elif isinstance(node, list):
            stack += [(v, depth + 1) for v in node]
    return None


def _details(value: Any) -> str | None:
    if not isinstance(value, dict):
        return "must be an object"
    return _depth(value)


_US = _within(0, MAX_US)
CONSTRAINTS: dict[str, dict[str, Check]] = {
    "exchange": {
        "request_headers": _headers,
        "response_headers": _headers,
        "state": _one_of([s.value for s in ExchangeState]),
        "outcome": _one_of([o.value for o in Outcome]),
        "api": _one_of(api_names()),
        "status": _within(100, 599),
        "reason": reason_problem,
        "port": _within(0, 65535),
        "ttfb_us": _US,
        "duration_us": _US,
        "ttft_us": _US,
        "gap_median_us": _US,
        "gap_p95_us": _US,
        "gap_max_us": _US,
        "details": _details,
        "transport": _one_of([t.value for t in Transport]),
    },
    "event": {
        "offset_us": _US,
        # A WebSocket message's: replay sends nothing but a text or binary frame.
        "direction": _one_of([d.value for d in Direction]),
        "opcode": _one_of([o.value for o in Opcode]),
    },
    "chunk": {"offset_us": _US},
}


def check(kind: str, name: str, value: Any) -> str | None:
    """What is wrong with ``value`` for column ``name`` of a ``kind`` line, or None."""
    constraint = CONSTRAINTS[kind].get(name)
    if constraint is not None:
        return constraint(value)
    if isinstance(value, int) and not isinstance(value, bool) and not -_INT64 <= value <= _INT64:
        return "does not fit a 64-bit integer"
    return None
