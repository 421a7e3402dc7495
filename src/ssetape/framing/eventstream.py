"""Incremental splitter for AWS event streams (``application/vnd.amazon.eventstream``).

Amazon Bedrock streams ConverseStream and InvokeModelWithResponseStream as binary frames::

    total length (u32) | headers length (u32) | prelude CRC32 (u32) | headers | payload | CRC32

big-endian, with both checksums CRC-32 (ISO-HDLC, what :func:`zlib.crc32` computes) over the
bytes before them. Each header is a name (u8 length, UTF-8), a type byte and a typed value;
``:message-type`` says event, exception or error, and ``:event-type`` / ``:exception-type`` /
``:error-code`` name it.

Like :mod:`ssetape.framing.sse` it is sans-IO and chunking-independent, and every input byte
ends up in exactly one frame's ``raw``, so the recorded body is byte-exact. A frame whose prelude is
impossible (shorter than a frame, headers longer than the frame, a prelude checksum that does
not match) leaves no way to find the next one: the rest of the stream is then handed back as
unframed bytes, still exact. A frame longer than ``max_frame`` is skipped by its length, never
buffered. A failed message checksum is reported and the frame kept: what was sent is recorded.

The decoding is small enough to own rather than depend on botocore (13 MB) in the recording
process; the tests check it frame for frame against botocore's own parser.
"""

from __future__ import annotations

import json
import struct
import zlib
from typing import NamedTuple

__all__ = [
    "DEFAULT_MAX_FRAME",
    "EventStreamParser",
    "Frame",
    "FrameCounter",
    "decode_headers",
    "encode_frame",
]

DEFAULT_MAX_FRAME = 16 * 1024 * 1024
_PRELUDE = 12
_MIN_FRAME = 16  # a prelude and a message CRC: no headers, no payload
# The limits AWS documents for one message (botocore's eventstream enforces the same).
_MAX_HEADERS = 128 * 1024
_MAX_PAYLOAD = 24 * 1024 * 1024
_PRELUDE_FMT = struct.Struct(">III")
# Header value type byte -> fixed width (None: a u16 length comes first).
_WIDTHS: dict[int, int | None] = {0: 0, 1: 0, 2: 1, 3: 2, 4: 4, 5: 8, 6: None, 7: None, 8: 8, 9: 16}
# ``:message-type`` -> the header naming the message.
_NAMED_BY = {"event": ":event-type", "exception": ":exception-type", "error": ":error-code"}


class Frame(NamedTuple):
    """One frame's exact bytes and what it says: its type (the event, exception or error
    name) and its payload as text. Both None for bytes that are not a whole, readable frame.
    (A tuple: one is made per frame, and a tuple is made in C.)"""

    raw: bytes
    type: str | None
    data: str | None
    id: str | None = None


def decode_headers(block: bytes) -> dict[str, object]:
    """The headers of one frame; raises ValueError when they do not parse."""
    out: dict[str, object] = {}
    i, end = 0, len(block)
    while i < end:
        n = block[i]
        name = block[i + 1 : i + 1 + n].decode("utf-8")
        i += 1 + n
        if i >= end:
            raise ValueError("header without a value type")
        kind = block[i]
        i += 1
        if kind not in _WIDTHS:
            raise ValueError(f"header {name!r} has unknown value type {kind}")
        width = _WIDTHS[kind]
        if width is None:
            if i + 2 > end:
                raise ValueError(f"header {name!r} is cut short")
            width = int.from_bytes(block[i : i + 2], "big")
            i += 2
        if i + width > end:
            raise ValueError(f"header {name!r} is cut short")
        value = block[i : i + width]
        i += width
        out[name] = (
            kind == 0
            if kind in (0, 1)
            else value.decode("utf-8", "replace")
            if kind == 7
            else int.from_bytes(value, "big", signed=True)
            if kind in (2, 3, 4, 5, 8)
            else value
        )
    return out


# Stands for a frame over the size bound, in order among the frames returned: no bytes.
_PASSED_OVER = Frame(b"", None, None)


def encode_frame(headers: dict[str, str], payload: bytes) -> bytes:
    """One frame with string headers, as AWS writes it (for replayed faults and tests)."""
    block = b"".join(
        bytes([len(name)]) + name.encode() + b"\x07" + len(value.encode()).to_bytes(2, "big")
        + value.encode()
        for name, value in headers.items()
    )  # fmt: skip
    total = _MIN_FRAME + len(block) + len(payload)
    head = struct.pack(">II", total, len(block))
    head += struct.pack(">I", zlib.crc32(head))
    body = head + block + payload
    return body + struct.pack(">I", zlib.crc32(body))


class EventStreamParser:
    """Split a byte stream into :class:`Frame` objects, chunk by chunk.

    ``b"".join(f.raw for f in frames)`` over everything returned by :meth:`feed` and
    :meth:`close`, plus the bytes of skipped frames, equals the input. A frame over
    ``max_frame`` comes back as a frame with no bytes, where it was, and counts in
    :attr:`skipped`."""

    __slots__ = ("_broken", "_buf", "_closed", "_max", "_skip", "problems", "skipped")

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        self._buf = bytearray()
        self._max = max_frame
        self._skip = 0  # bytes of an oversized frame still to pass over
        self._broken = False  # no frame boundary can be found any more
        self._closed = False
        self.skipped = 0  # frames over max_frame, passed over
        self.problems: list[str] = []  # what the caller should report, in order

    @property
    def pending(self) -> int:
        return len(self._buf)

    def tail(self, n: int) -> bytes:
        return bytes(self._buf[-n:]) if n > 0 else b""

    def feed(self, chunk: bytes) -> list[Frame]:
        if self._closed:
            raise ValueError("EventStreamParser.feed() called after close()")
        if self._broken:
            return [Frame(bytes(chunk), None, None)] if chunk else []
        if self._skip:
            passed = min(self._skip, len(chunk))
            self._skip -= passed
            chunk = chunk[passed:]
        self._buf += chunk
        out: list[Frame] = []
        while len(self._buf) >= _PRELUDE:
            total, headers, crc = _PRELUDE_FMT.unpack_from(self._buf)
            why = _impossible(bytes(self._buf[:8]), total, headers, crc)
            if why is not None:
                self.problems.append(f"{why}: the rest of the stream is kept unframed")
                self._broken = True
                out.append(Frame(bytes(self._buf), None, None))
                self._buf = bytearray()
                break
            if total > self._max:
                self.skipped += 1
                out.append(_PASSED_OVER)  # where it was, for the caller's count and gap
                passed = min(total, len(self._buf))
                del self._buf[:passed]
                self._skip = total - passed
                if self._skip:
                    break
                continue
            if len(self._buf) < total:
                break
            raw = bytes(self._buf[:total])
            del self._buf[:total]
            out.append(self._frame(raw, headers))
        return out

    def close(self) -> list[Frame]:
        """End of input: bytes of an unfinished frame come back unframed."""
        self._closed = True
        if not self._buf:
            return []
        self.problems.append(f"the stream ended {len(self._buf)} bytes into a frame")
        rest, self._buf = bytes(self._buf), bytearray()
        return [Frame(rest, None, None)]

    def _frame(self, raw: bytes, headers_len: int) -> Frame:
        (crc,) = struct.unpack_from(">I", raw, len(raw) - 4)
        if zlib.crc32(memoryview(raw)[:-4]) != crc:
            self.problems.append("a frame's message checksum does not match; kept as sent")
        try:
            headers = decode_headers(raw[_PRELUDE : _PRELUDE + headers_len])
        except (ValueError, IndexError, UnicodeDecodeError) as e:
            self.problems.append(f"a frame's headers do not parse ({e}); kept as sent")
            return Frame(raw, None, None)
        kind = headers.get(":message-type", "event")
        name = headers.get(_NAMED_BY.get(kind, ":event-type")) if isinstance(kind, str) else None
        payload = raw[_PRELUDE + headers_len : -4]
        if kind == "error" and not payload:
            # An error message says what it is in its headers only.
            message = headers.get(":error-message")
            payload = json.dumps({"message": message if isinstance(message, str) else ""}).encode()
        return Frame(
            raw,
            name if isinstance(name, str) and name else None,
            payload.decode("utf-8", "replace"),
        )


def _impossible(prelude: bytes, total: int, headers: int, crc: int) -> str | None:
    if zlib.crc32(prelude) != crc:
        return "a frame's prelude checksum does not match"
    if total < _MIN_FRAME or headers > total - _MIN_FRAME:
        return f"a frame claims {total} bytes with {headers} bytes of headers"
    if headers > _MAX_HEADERS or total - headers - _MIN_FRAME > _MAX_PAYLOAD:
        return f"a frame claims {total} bytes, past the format's limits"
    return None


class FrameCounter:
    """How many rows :class:`EventStreamParser` makes of a stream, counted without holding
    its frames: the proxy counts what it hands a recording process (see
    ``ssetape.recording.event_count``), so it keeps only a partial prelude and a length."""

    __slots__ = ("_broken", "_head", "_left")

    def __init__(self) -> None:
        self._head = b""  # the start of a prelude split across chunks
        self._left = 0  # bytes of the current frame still to come
        self._broken = False

    def feed(self, chunk: bytes) -> int:
        if self._broken:
            return 1 if chunk else 0
        n, i, end = 0, 0, len(chunk)
        while i < end:
            if self._left:
                step = min(self._left, end - i)
                self._left -= step
                i += step
                n += not self._left and bool(self._head)  # a frame whose end is here
                if not self._left:
                    self._head = b""
                continue
            need = _PRELUDE - len(self._head)
            self._head += chunk[i : i + need]
            i += min(need, end - i)
            if len(self._head) < _PRELUDE:
                break
            total, headers, crc = _PRELUDE_FMT.unpack(self._head)
            if _impossible(self._head[:8], total, headers, crc) is not None:
                self._broken = True
                return n + 1
            self._left = total - _PRELUDE
        return n

    def close(self) -> int:
        """1 for an unfinished frame the parser hands back unframed."""
        return 1 if self._head and not self._broken else 0
