"""Incremental splitter for newline-delimited JSON streams (``application/x-ndjson``).

Ollama's native API (``/api/chat``, ``/api/generate``) and other producers stream one JSON
document per line. Like :mod:`ssetape.sse` it is sans-IO and chunking-independent, and every
input byte ends up in exactly one line's ``raw`` (its newline included), so the recorded body
is byte-exact. A line's ``data`` is its text without the line end; a blank line has none.
The caller bounds a line's size through :attr:`NdjsonParser.pending`, as it does for SSE.
"""

from __future__ import annotations

from ssetape.framing.eventstream import Frame

__all__ = ["NdjsonParser"]


class NdjsonParser:
    """Split a byte stream into one :class:`Frame` per line."""

    __slots__ = ("_buf", "_closed", "_scan", "problems", "skipped")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._scan = 0  # where the newline search resumes: each byte is looked at once
        self._closed = False
        self.skipped = 0
        self.problems: list[str] = []

    @property
    def pending(self) -> int:
        return len(self._buf)

    def tail(self, n: int) -> bytes:
        return bytes(self._buf[-n:]) if n > 0 else b""

    def feed(self, chunk: bytes) -> list[Frame]:
        if self._closed:
            raise ValueError("NdjsonParser.feed() called after close()")
        self._buf += chunk
        out: list[Frame] = []
        start = 0
        while (end := self._buf.find(b"\n", max(start, self._scan))) >= 0:
            out.append(_line(bytes(self._buf[start : end + 1])))
            start = end + 1
        if start:
            del self._buf[:start]
        self._scan = len(self._buf)
        return out

    def close(self) -> list[Frame]:
        """End of input: a last line without its newline is still a line."""
        self._closed = True
        if not self._buf:
            return []
        rest, self._buf = bytes(self._buf), bytearray()
        return [_line(rest)]


def _line(raw: bytes) -> Frame:
    text = raw.rstrip(b"\r\n").decode("utf-8", "replace")
    return Frame(raw, None, text if text.strip() else None)
