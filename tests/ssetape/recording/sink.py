"""A stand-in for the writer behind ``Capture``: keeps the rows, by column name."""

from __future__ import annotations

from typing import Any

from ssetape.records import ChunkRow, EventRow
from ssetape.storage.batch import CHUNKS_OP, EVENTS_OP, TABLES

_EVENT_KEYS, _CHUNK_KEYS = TABLES[EVENTS_OP][1], TABLES[CHUNKS_OP][1]


class Sink:
    """Collects rows as the writer would; optionally fails on its n-th call."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.events: list[dict[str, Any]] = []
        self.chunks: list[dict[str, Any]] = []
        self.calls = 0
        self.fail_at = fail_at
        self.kinds: list[str] = []  # "events" or "chunks", call by call

    def _call(self, kind: str) -> None:
        self.calls += 1
        self.kinds.append(kind)
        if self.calls == self.fail_at:
            raise RuntimeError("sink exploded")

    def add_events(self, uid: str, rows: list[EventRow]) -> None:
        self._call("events")
        self.events += [dict(zip(_EVENT_KEYS, r, strict=True)) for r in rows]

    def add_chunks(self, uid: str, rows: list[ChunkRow]) -> None:
        self._call("chunks")
        self.chunks += [dict(zip(_CHUNK_KEYS, r, strict=True)) for r in rows]

    def raw(self) -> bytes:
        return b"".join(e["raw"] for e in self.events)
