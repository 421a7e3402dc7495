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

from ssetape.framing.eventstream import FrameCounter
from ssetape.framing.framings import Framing

__all__ = ["EventCount"]

_SSE, _OTHER, _ENCODED, _NDJSON, _FRAMES = range(5)
_KINDS = {Framing.SSE: _SSE, Framing.NDJSON: _NDJSON, Framing.EVENTSTREAM: _FRAMES}
_ENDS = (b"\r\n\r\n", b"\n\n", b"\r\r")  # as capture splits events


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
        if kind == _NDJSON:
            if data:
                self._tails[uid] = data[-1:]
            return data.count(b"\n")
        if kind == _FRAMES:
            return self._counters[uid].feed(data)
        if kind != _SSE:
            return 1 if kind == _OTHER and data else 0
        tail = self._tails.get(uid, b"")
        joined = tail + data[:3]
        # Terminators inside this chunk, plus one that starts in the last chunk's tail.
        n = _ends(data) + _ends(joined) - _ends(tail) - _ends(data[:3])
        self._tails[uid] = (tail + data)[-3:]
        return max(n, 0)

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


def _ends(data: bytes) -> int:
    # One line-end style per stream in practice: the first style found counts.
    for sep in _ENDS:
        n = data.count(sep)
        if n:
            return n
    return 0
