"""The rows a recorded stream is stored as: plain tuples from capture to the database.

A relayed stream becomes one row per SSE event (or per chunk of a non-SSE stream) and, when
it is content-encoded, one row per wire chunk as it arrived (replay sends those). Rows are
tuples in column order, not objects: one is made for every event the proxy relays, and the
recording process's CPU per event is a measured budget.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["ChunkRow", "EventRow", "EventSink", "MessageRow"]

# (seq, offset_us, event type, data, SSE id, raw bytes): ``data`` None for comments and
# non-SSE chunks; ``raw`` the exact bytes, so replayed bodies are byte-identical.
EventRow = tuple[int, int, str | None, str | None, str | None, bytes]
# A WebSocket message: an event row and its direction and opcode (vocabulary.Direction,
# Opcode); ``raw`` its exact payload, ``data`` that payload as text when it is UTF-8.
MessageRow = tuple[int, int, str | None, str | None, None, bytes, str, str]
# (seq, offset_us, wire bytes) of a content-encoded stream, still compressed.
ChunkRow = tuple[int, int, bytes]


class EventSink(Protocol):
    """Where a capture's rows go (the live analysis, then the writer), by exchange uid."""

    def add_events(self, uid: str, rows: list[EventRow]) -> None: ...
    def add_chunks(self, uid: str, rows: list[ChunkRow]) -> None: ...
