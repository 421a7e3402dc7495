"""Recorded text as an agent gets it: data in a field, cut, with its full size.

Everything a store holds came over the wire from a client or an upstream, so any of it may be
written to steer the agent that reads it ("ignore previous instructions..."). It is handed out
only as the value of a JSON field, never in a tool's own words, and a long text is cut so that
no recorded stream can flood an agent's context.
"""

from __future__ import annotations

from typing import Any

import orjson

from ssetape.storage.exchange_heads import Cut

__all__ = ["KEPT", "SHORT", "TEXT", "clip", "fit", "head", "size", "text"]

# Characters of a long text (output, a body, an event's data) handed out.
TEXT = 4000
# Characters of any other string (a URL, a header, a model name, an error).
SHORT = 500
# Strings :func:`fit` never cuts: ids, timestamps (32 characters), names of things.
KEPT = 32


def text(value: str | bytes | None, limit: int = TEXT) -> dict[str, Any] | None:
    """``{"text": ..., "truncated": bool, "size": n}``: the first ``limit`` characters and
    the full size (characters of a text; bytes of a body, decoded as UTF-8 for showing)."""
    if value is None:
        return None
    if isinstance(value, bytes):
        shown = value[:limit].decode("utf-8", "replace")
        return {"text": shown, "truncated": len(value) > limit, "size": len(value)}
    return {"text": value[:limit], "truncated": len(value) > limit, "size": len(value)}


def head(value: Cut | None, limit: int = TEXT) -> dict[str, Any] | None:
    """:func:`text` of a body or text the store cut (``storage.exchange_heads``): its head,
    with the size of the whole."""
    if value is None:
        return None
    shown = value.head[:limit]
    if isinstance(shown, bytes):
        shown = shown.decode("utf-8", "replace")
    return {"text": shown, "truncated": value.size > limit, "size": value.size}


def clip(obj: Any, limit: int = SHORT) -> Any:
    """``obj`` (JSON) with every string longer than ``limit`` replaced by :func:`text` of it."""
    if isinstance(obj, str):
        return obj if len(obj) <= limit else text(obj, limit)
    if isinstance(obj, dict):
        return {k: clip(v, limit) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [clip(v, limit) for v in obj]
    return obj


def size(obj: Any) -> int:
    """Bytes of ``obj`` as compact JSON: what a tool's answer costs an agent."""
    return len(orjson.dumps(obj))


def _cut(obj: Any, limit: int) -> Any:
    """``obj`` with every text longer than ``limit`` cut to it (a cut text keeps the size of
    the whole)."""
    if isinstance(obj, str):
        return obj if len(obj) <= limit else text(obj, limit)
    if isinstance(obj, dict):
        if obj.keys() == {"text", "truncated", "size"} and isinstance(obj["text"], str):
            if len(obj["text"]) <= limit:
                return obj
            return {"text": obj["text"][:limit], "truncated": True, "size": obj["size"]}
        return {k: _cut(v, limit) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_cut(v, limit) for v in obj]
    return obj


def _longest(obj: Any) -> int:
    if isinstance(obj, str):
        return len(obj)
    if isinstance(obj, dict):
        return max((_longest(v) for v in obj.values()), default=0)
    if isinstance(obj, list | tuple):
        return max((_longest(v) for v in obj), default=0)
    return 0


def fit(obj: Any, budget: int) -> Any:
    """``obj`` with its texts cut to the longest length that keeps it within ``budget``
    bytes of JSON; never below :data:`KEPT` characters, so it may stay over the budget."""
    if size(obj) <= budget:
        return obj
    low, high = KEPT, _longest(obj)  # the answer lies in [low, high)
    while high - low > 1:
        mid = (low + high) // 2
        if size(_cut(obj, mid)) <= budget:
            low = mid
        else:
            high = mid
    return _cut(obj, low)
