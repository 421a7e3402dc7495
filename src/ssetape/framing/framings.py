"""How a streamed body is cut into the events ssetape stores: one registry, by content type.

Each framing is a sans-IO parser whose frames hold their exact bytes (``raw``), so a recorded
body is the frames put back together, byte for byte, and replay sends them with their timing.
A body no framing claims is stored as the wire chunks it came in (``CHUNKS``); an API whose
stream is one JSON array (Gemini without ``alt=sse``) reads those chunks itself.

Adding a framing is one parser module and one :class:`FramingSpec` in :data:`FRAMINGS`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Protocol

from ssetape.framing.eventstream import EventStreamParser
from ssetape.framing.ndjson import NdjsonParser
from ssetape.framing.sse import SseParser

__all__ = [
    "FRAMINGS",
    "FrameParser",
    "Framing",
    "FramingSpec",
    "ParsedFrame",
    "frame_fields",
    "framing_of",
    "framing_of_headers",
]


class Framing(StrEnum):
    SSE = "sse"
    EVENTSTREAM = "eventstream"  # AWS binary event stream (Amazon Bedrock)
    NDJSON = "ndjson"  # one JSON document per line (Ollama)
    CHUNKS = "chunks"  # no frames: the wire chunks as they came

    @classmethod
    def validate(cls, value: str) -> Framing:
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"unknown framing {value!r} (one of {', '.join(cls)})") from None


class ParsedFrame(Protocol):
    @property
    def raw(self) -> bytes: ...
    @property
    def type(self) -> str | None: ...
    @property
    def data(self) -> str | None: ...
    @property
    def id(self) -> str | None: ...


class FrameParser(Protocol):
    """What capture needs of a framing's parser."""

    # Frames over the size bound the parser passed over itself, each returned in its place as
    # a frame with no bytes (no real frame is empty); the caller resets it.
    skipped: int
    problems: list[str]  # what the exchange should say about its bytes, in order

    @property
    def pending(self) -> int: ...
    def tail(self, n: int) -> bytes: ...
    def feed(self, chunk: bytes) -> Sequence[ParsedFrame]: ...
    def close(self) -> Sequence[ParsedFrame]: ...


class _SseFrames(SseParser):
    """The SSE parser as a :class:`FrameParser`: capture bounds its events itself."""

    __slots__ = ("problems", "skipped")

    def __init__(self, max_frame: int) -> None:
        super().__init__()
        self.skipped = 0
        self.problems: list[str] = []


@dataclass(frozen=True, slots=True)
class FramingSpec:
    framing: Framing
    # Content types (prefixes, lower case) whose bodies this framing cuts.
    content_types: tuple[str, ...]
    # The parser, given the size bound of one frame.
    parser: Callable[[int], FrameParser]
    # Byte sequences a frame ends with, where capture resumes after bytes it never got (a
    # gap) or an oversized frame; empty when a frame's start cannot be found that way.
    ends: tuple[bytes, ...]


FRAMINGS = MappingProxyType(
    {
        spec.framing: spec
        for spec in (
            FramingSpec(
                Framing.SSE, ("text/event-stream",), _SseFrames, (b"\n\n", b"\r\r", b"\r\n\r\n")
            ),
            FramingSpec(
                Framing.EVENTSTREAM, ("application/vnd.amazon.eventstream",), EventStreamParser, ()
            ),
            FramingSpec(
                Framing.NDJSON,
                ("application/x-ndjson", "application/jsonl", "application/jsonlines"),
                lambda _max: NdjsonParser(),
                (b"\n",),
            ),
        )
    }
)


def framing_of(content_type: str | None) -> Framing:
    ctype = (content_type or "").strip().lower()
    for spec in FRAMINGS.values():
        if ctype.startswith(spec.content_types):
            return spec.framing
    return Framing.CHUNKS


def framing_of_headers(headers: Iterable[Sequence[str]] | None) -> Framing:
    """The framing of a response from its stored headers ([name, value] pairs)."""
    for name, value in headers or ():
        if name.lower() == "content-type":
            return framing_of(value)
    return Framing.CHUNKS


def frame_fields(raw: bytes, framing: Framing) -> dict[str, str | None]:
    """One stored frame's type, data and id, parsed from its bytes as capture parsed them;
    nothing when the bytes are not one frame (or the body is not framed)."""
    spec = FRAMINGS.get(framing)
    if spec is None:
        return {}
    parser = spec.parser(len(raw) + 1)
    frames = [*parser.feed(raw), *parser.close()]
    if len(frames) != 1:
        return {}
    frame = frames[0]
    return {"event": frame.type, "data": frame.data, "sse_id": frame.id}
