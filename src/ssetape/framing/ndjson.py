"""Incremental splitter for newline-delimited JSON streams (``application/x-ndjson``).

Ollama's native API (``/api/chat``, ``/api/generate``) and other producers stream one JSON
document per line. Like :mod:`ssetape.framing.sse` it is sans-IO and chunking-independent, and every
input byte ends up in exactly one line's ``raw`` (its newline included), so the recorded body
is byte-exact. A line's ``data`` is its text without the line end; a blank line has none.
The caller bounds a line's size through :attr:`NdjsonParser.pending`, as it does for SSE.
"""

from __future__ import annotations

from ssetape.framing.eventstream import Frame

__all__ = ["NdjsonParser"]


class NdjsonParser:
    """Split a byte stream into one :class:`Frame` per line."""

    __slots__ = ("_buf", "_closed", "problems", "skipped")

    def __init__(self) -> None:
        self._buf = bytearray()  # the start of a line whose newline has not come
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
        if chunk.find(b"\n") < 0:  # only the new bytes are searched: a long line costs O(n)
            self._buf += chunk
            return []
        data = bytes(self._buf) + chunk if self._buf else chunk
        *lines, rest = data.split(b"\n")  # in C: the cost of a plain split
        self._buf = bytearray(rest)
        return [_line(line + b"\n") for line in lines]

    def close(self) -> list[Frame]:
        """End of input: a last line without its newline is still a line."""
        self._closed = True
        if not self._buf:
            return []
        rest, self._buf = bytes(self._buf), bytearray()
        return [_line(rest)]


def _line(raw: bytes) -> Frame:
    text = raw.rstrip(b"\r\n").decode("utf-8", "replace")
    return Frame(raw, None, text if text and not text.isspace() else None)
