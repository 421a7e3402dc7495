"""The tool calls a stream opens, of which the first :data:`MAX_TOOL_CALLS` are kept.

A stream may open any number of calls (200,000 take 11 MB as JSON): the analysis keeps the
first ones whole, counts the others and keeps nothing of them, so that neither its memory,
nor the stored knowledge, nor what a reader shows grows with the stream.
"""

from __future__ import annotations

from collections.abc import Iterator, ValuesView
from dataclasses import dataclass, field

__all__ = ["MAX_TOOL_CALLS", "ToolCall", "ToolCalls"]

# Tool calls kept per exchange (the stored knowledge's `tool_calls`); past it, only counted.
MAX_TOOL_CALLS = 1000
# Characters of a call's id or name kept: more is no id or function name.
_NAME = 1000
# Calls past the bound are told apart by their key, of which the most recent are remembered
# (as hashes): deltas of one call follow one another, so a call is counted once unless
# more than this many others come between two of its pieces.
_RECENT = 64


@dataclass(slots=True)
class ToolCall:
    id: str = ""
    name: str = ""
    parts: list[str] = field(default_factory=list)
    # The complete arguments when the stream states them (Responses ``...arguments.done``,
    # non-streamed bodies); they win over the concatenated deltas.
    final: str | None = None


class ToolCalls:
    """The calls of one exchange by the key its API names them with (an index, an id).

    ``values()`` are the kept calls, in the order they opened; ``len()`` counts every call
    opened, kept or not (a rule that keys calls by their number gets a new key for each);
    ``reversed()`` starts at the key of the last call opened (as a dict's would)."""

    def __init__(self) -> None:
        self._kept: dict[object, ToolCall] = {}
        self._past = 0
        self._recent: dict[int, None] = {}
        self._last: object = None

    def call(self, key: object) -> ToolCall:
        """The call ``key`` names, opened if new; past the bound, a call kept nowhere."""
        kept = self._kept.get(key)
        if kept is not None:
            return kept
        if len(self._kept) < MAX_TOOL_CALLS:
            self._last = key
            kept = self._kept[key] = ToolCall()
            return kept
        h = hash(key)
        if h in self._recent:
            del self._recent[h]  # moved to the newest end
        else:
            self._last = key
            self._past += 1
            if len(self._recent) >= _RECENT:
                del self._recent[next(iter(self._recent))]
        self._recent[h] = None
        return ToolCall()

    def values(self) -> ValuesView[ToolCall]:
        return self._kept.values()

    def __len__(self) -> int:
        return len(self._kept) + self._past

    def __reversed__(self) -> Iterator[object]:
        if self._last is not None:
            yield self._last

    def listed(self) -> list[dict[str, str]]:
        """The kept calls as the stored knowledge holds them."""
        return [
            {
                "id": c.id[:_NAME],
                "name": c.name[:_NAME],
                "arguments": "".join(c.parts) if c.final is None else c.final,
            }
            for c in self._kept.values()
        ]
