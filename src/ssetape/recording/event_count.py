"""Events in relayed bytes, counted on the proxy's side as the recording process stores them.

What the proxy handed a recording process that then died, minus what the store holds, is what
died with it: both sides must count the same things. The store keeps one row per SSE event
(comments too, and a last event without its blank line), per NDJSON line, per AWS event-stream
frame, one per chunk of another stream, and the decoded events of a content-encoded stream.
So an SSE terminator that spans two chunks is one event, not one per chunk; and an encoded
stream's events, which exist only decoded, are not counted here at all (the recording process
reports those itself while it lives).
"""

from __future__ import annotations

import re

from ssetape.framing.eventstream import FrameCounter
from ssetape.framing.framings import Framing

__all__ = ["EventCount"]

_SSE, _OTHER, _ENCODED, _NDJSON, _FRAMES = range(5)
_KINDS = {Framing.SSE: _SSE, Framing.NDJSON: _NDJSON, Framing.EVENTSTREAM: _FRAMES}
_CRLF2, _LF2, _CR2 = _ENDS = (b"\r\n\r\n", b"\n\n", b"\r\r")  # as capture splits events
_START = b"\r\n"
_CR, _LF = b"\r", ord("\n")
_RUNS = {sep: sep + sep[: len(sep) // 2] for sep in _ENDS}  # three line ends in a row
_LF3 = _RUNS[_LF2]


class EventCount:
    """Per exchange: its kind, and the last bytes of its previous chunk (for a terminator
    split across two). A few C-speed byte searches per chunk: this runs on the proxy's loop."""

    __slots__ = ("_counters", "_kinds", "_tails")

    def __init__(self) -> None:
        self._kinds: dict[str, int] = {}
        self._tails: dict[str, bytes] = {}
        self._counters: dict[str, FrameCounter] = {}

    def stream(self, uid: str, *, framing: Framing, encoded: bool) -> None:
        kind = _ENCODED if encoded else _KINDS.get(framing, _OTHER)
        self._kinds[uid] = kind
        if kind == _FRAMES:
            self._counters[uid] = FrameCounter()

    def chunk(self, uid: str, data: bytes) -> int:
        kind = self._kinds.get(uid, _SSE)
        if kind != _SSE:
            return self._other(kind, uid, data)
        if not data:
            return 0
        # The stream's start counts as a line end: an empty line there is an event of its own.
        tails = self._tails
        tail = tails.get(uid, _START)
        tails[uid] = data[-3:] if len(data) >= 3 else (tail + data)[-3:]
        if data.find(_CR) < 0 and tail.find(_CR) < 0:
            # The usual stream, without CR: its line ends are LF alone, and so is the style.
            n = data.count(_LF2)
            if n and data.find(_LF3) >= 0:
                n = _overlapping(data, _LF2)
            return n + 1 if tail[-1] == _LF and data[0] == _LF else n
        sep = _style(tail + data[:3]) or _style(data)
        if sep is None:
            return 0
        # Blank lines inside this chunk, plus those that start in the last chunk's tail.
        n = _blank_lines(data, sep)
        if sep is _CRLF2:
            return n + _blank_lines(tail[-3:] + data[:3], sep)
        # A one-byte line end: a blank line across the seam is its byte on both sides.
        end = sep[0]
        return n + 1 if tail[-1] == end and data[0] == end else n

    def _other(self, kind: int, uid: str, data: bytes) -> int:
        if kind == _NDJSON:
            if data:
                self._tails[uid] = data[-1:]
            return data.count(b"\n")
        if kind == _FRAMES:
            return self._counters[uid].feed(data)
        return 1 if kind == _OTHER and data else 0

    def end(self, uid: str) -> int:
        """The stream is over: 1 for a last SSE event that had no blank line after it."""
        kind = self._kinds.pop(uid, _SSE)
        tail = self._tails.pop(uid, b"")
        counter = self._counters.pop(uid, None)
        if counter is not None:
            return counter.close()
        if kind == _NDJSON:
            return 1 if tail and tail != b"\n" else 0  # a last line without its newline
        if kind != _SSE or not tail or tail.endswith((b"\n\n", b"\r\r", b"\n\r\n")):
            return 0
        return 1


def _style(data: bytes) -> bytes | None:
    # One line-end style per stream in practice: the first style found counts. (Spelled out:
    # a generator here cost a third of each chunk's count.)
    find = data.find  # (``in`` on bytes costs more: it first tries the needle as an int)
    if find(_CRLF2) >= 0:
        return _CRLF2
    if find(_LF2) >= 0:
        return _LF2
    if find(_CR2) >= 0:
        return _CR2
    return None


def _blank_lines(data: bytes, sep: bytes) -> int:
    """Lines that end empty: ``sep`` occurrences, overlapping ones too (each line end after
    a blank line makes an event of its own, as the parser stores it)."""
    n = data.count(sep)
    if not n or data.find(_RUNS[sep]) < 0:
        return n  # no run of three line ends: none overlap
    return _overlapping(data, sep)


def _overlapping(data: bytes, sep: bytes) -> int:
    return len(re.findall(b"(?=" + re.escape(sep) + b")", data))
