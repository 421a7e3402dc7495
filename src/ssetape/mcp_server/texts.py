"""Recorded text as an agent gets it: data in a field, cut, with its full size.

Everything a store holds came over the wire from a client or an upstream, so any of it may be
written to steer the agent that reads it ("ignore previous instructions..."). It is handed out
only as the value of a JSON field, never in a tool's own words, and a long text is cut so that
no recorded stream can flood an agent's context.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SHORT", "TEXT", "clip", "text"]

# Characters of a long text (output, a body, an event's data) handed out.
TEXT = 4000
# Characters of any other string (a URL, a header, a model name, an error).
SHORT = 500


def text(value: str | bytes | None, limit: int = TEXT) -> dict[str, Any] | None:
    """``{"text": ..., "truncated": bool, "size": n}``: the first ``limit`` characters and
    the full size (characters of a text; bytes of a body, decoded as UTF-8 for showing)."""
    if value is None:
        return None
    if isinstance(value, bytes):
        shown = value[:limit].decode("utf-8", "replace")
        return {"text": shown, "truncated": len(value) > limit, "size": len(value)}
    return {"text": value[:limit], "truncated": len(value) > limit, "size": len(value)}


def clip(obj: Any, limit: int = SHORT) -> Any:
    """``obj`` (JSON) with every string longer than ``limit`` replaced by :func:`text` of it."""
    if isinstance(obj, str):
        return obj if len(obj) <= limit else text(obj, limit)
    if isinstance(obj, dict):
        return {k: clip(v, limit) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [clip(v, limit) for v in obj]
    return obj
