"""How a simulated stream is written: events, comments and chunk boundaries, with times.

The API modules (openai_streams, anthropic_streams) describe what a stream says; a Script
records when each piece is written and where a write is split, so every scenario gets the
same chunk-boundary variety (a split mid-line, one inside a UTF-8 character, events glued).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from ssetape.simulator.encodings import ENCODERS
from ssetape.simulator.scenario import (
    KEEPALIVE_EVERY,
    PAUSE,
    SPLIT_GAP,
    TOKEN_GAP,
    Plan,
    PlannedChunk,
    Scenario,
    Split,
    plan_headers,
)


def sse(obj: Any, event: str | None = None) -> bytes:
    """One SSE event: an optional ``event:`` line and one compact JSON ``data:`` line."""
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + orjson.dumps(obj) + b"\n\n"


def comment(text: str) -> bytes:
    return f": {text}\n\n".encode()


def split_point(data: bytes, how: Split) -> int:
    """Where to cut ``data`` in two: inside a multi-byte character, or mid ``data:`` line."""
    if how == "utf8":
        lead = next((i for i, b in enumerate(data) if b >= 0xC0), -1)
        if lead >= 0:
            return lead + 1
    start = data.find(b"data: ") + 6 if b"data: " in data else 0
    end = data.find(b"\n", start) if b"\n" in data[start:] else len(data)
    at = max(1, min(len(data) - 1, (start + end) // 2))
    while at > 1 and 0x80 <= data[at] < 0xC0:
        at -= 1  # a mid-line split should not also be a UTF-8 split
    return at


@dataclass(slots=True)
class _Write:
    t: float
    data: bytes


class Script:
    """Collects the writes of a stream with their times (seconds at speed 1)."""

    def __init__(self, sc: Scenario, chatter: bool = False) -> None:
        self.sc = sc
        self.chatter = chatter  # an OpenRouter-style comment glued to the 7th answer token
        self.rng = random.Random(sc.seed)
        self.plain = sc.has("plain")
        self.t = 0.0
        self.cut = False
        self._hold = 0.0
        self._writes: list[_Write] = []

    def jitter(self, base: float = TOKEN_GAP) -> float:
        return base * (0.6 + 0.8 * self.rng.random())

    def emit(self, data: bytes, after: float | None = None, split: Split | None = None) -> None:
        """Write ``data`` ``after`` seconds after the previous write (a jittered token gap
        when None), in two writes ``SPLIT_GAP`` apart when ``split``."""
        self.t += (self.jitter() if after is None else after) + self._hold
        self._hold = 0.0
        if split is not None and not self.plain:
            at = split_point(data, split)
            self._writes.append(_Write(self.t, data[:at]))
            self.t += SPLIT_GAP
            data = data[at:]
        self._writes.append(_Write(self.t, data))

    def glue(self, data: bytes) -> None:
        """Put ``data`` in the same write as the previous data."""
        if self.plain or not self._writes:
            self.emit(data, 0.001)
        else:
            self._writes[-1].data += data

    def emit_cut(self, data: bytes, after: float | None = None) -> None:
        """The last write of a stream that breaks: only the first part of ``data``."""
        self.emit(data[: split_point(data, "line")], after)
        self.cut = True

    def pause(self) -> None:
        """A long silence kept alive with comment lines; the next write ends it."""
        for _ in range(round(PAUSE / KEEPALIVE_EVERY) - 1):
            self.emit(comment("keep-alive"), KEEPALIVE_EVERY)
        self._hold = KEEPALIVE_EVERY

    def stream(
        self, tokens: Sequence[str], make: Callable[[str], bytes], main: bool = True
    ) -> bool:
        """One event per token. The ``main`` answer also gets the pause, the chunk-boundary
        variety, the chatter and the mid-stream failure: then it stops halfway (cutting the
        next event for ``cut``) and returns False."""
        failure = self.sc.failure if main else None
        stop = max(1, len(tokens) // 2) if failure else None
        for i, token in enumerate(tokens):
            if i == stop:
                if failure == "cut":
                    self.emit_cut(make(token))
                return False
            if main and self.sc.has("pause") and i == len(tokens) // 3:
                self.pause()
            if main and self.chatter and i == 6:
                self.emit(comment("OPENROUTER PROCESSING"))
                self.glue(make(token))
            else:
                split: Split | None = "utf8" if i == 2 else "line" if i == 4 else None
                self.emit(make(token), None, split if main else None)
        return stop is None

    def chunks(self, speed: float) -> list[PlannedChunk]:
        return [PlannedChunk(w.t / speed, w.data) for w in self._writes if w.data]


def stream_plan(sc: Scenario, s: Script, speed: float) -> Plan:
    chunks = s.chunks(speed)
    if sc.encoding:
        # One flush per write so that every chunk decodes as soon as it arrives.
        encoder = ENCODERS[sc.encoding]()
        chunks = [PlannedChunk(c.at, encoder.chunk(c.data)) for c in chunks]
        if not s.cut and chunks:
            chunks[-1] = PlannedChunk(chunks[-1].at, chunks[-1].data + encoder.end())
    headers = [*plan_headers(sc, "text/event-stream; charset=utf-8"), ("cache-control", "no-cache")]
    return Plan(200, headers, chunks, s.cut, True)
