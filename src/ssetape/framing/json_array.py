"""Incremental splitter for a streamed top-level JSON array.

Google's Gemini API streams ``streamGenerateContent`` without ``alt=sse`` as one JSON array sent
in pieces over chunked ``application/json`` (``[{...}\\r\\n,{...}\\r\\n]``). To time each element
the way SSE events are timed, an element has to be recognised the moment its last byte arrives,
without waiting for the array to close and without parsing JSON: :class:`JsonArrayParser` only
tracks nesting and strings, and hands back each element's exact bytes.

Like :mod:`ssetape.framing.sse` it is sans-IO and chunking-independent: the elements are the same
however the input is split. The scan state is kept across feeds, so every byte is looked at
once (O(n) overall), and an element larger than ``max_element`` is skipped rather than buffered,
so memory stays bounded whatever the upstream sends.
"""

from __future__ import annotations

import re

__all__ = ["DEFAULT_MAX_ELEMENT", "JsonArrayParser"]

DEFAULT_MAX_ELEMENT = 16 * 1024 * 1024

_OPEN, _BETWEEN, _ELEMENT, _ENDED = range(4)
_QUOTE, _BACKSLASH = 0x22, 0x5C
_LBRACKET, _RBRACKET, _LBRACE, _RBRACE = 0x5B, 0x5D, 0x7B, 0x7D
# Searching with compiled byte classes keeps the per-byte work in C: the Python loop only runs
# once per structural byte, not once per byte.
_NOT_SPACE = re.compile(rb"[^ \t\r\n]")
_NOT_SEPARATOR = re.compile(rb"[^ \t\r\n,]")
_STRUCTURE = re.compile(rb'["\[\]{}]')
# Between strings, brackets and braces are counted in C on a copy of the bytes where they are
# all that is left, as "(" and ")": at most one Python step per window of 64 bytes or more,
# however dense the brackets (a per-bracket loop ran at ~3 MB/s on "[[[[...").
_PARENS = bytes.maketrans(b"[{]}", b"(())")
_NOT_BRACKET = bytes(sorted(set(range(256)) - set(b"[]{}")))
_LEAF, _WINDOW = 64, 1 << 16
_DENSE = 16  # brackets in a row before counting in bulk
_REDUCTIONS = 8  # bytes looked at per bracket, at most, to tell in bulk
_STRING_STOP = re.compile(rb'["\\]')
_SCALAR_END = re.compile(rb"[ \t\r\n,\]]")


class JsonArrayParser:
    """Split a streamed JSON array into its top-level elements, chunk by chunk.

    :meth:`feed` returns each element's bytes (no surrounding whitespace or commas) as soon as
    its closing brace, bracket or quote arrives; a bare number/true/false/null ends at the
    delimiter after it. Elements are delimited, not validated: parsing them is the caller's.

    ``dropped`` counts elements skipped for exceeding ``max_element`` bytes; ``invalid`` is set
    when the input does not start with ``[`` (the rest is then ignored); ``ended`` once the
    closing ``]`` arrived (anything after it is ignored).
    """

    __slots__ = (
        "_buf",
        "_closed",
        "_depth",
        "_dropping",
        "_escape",
        "_in_string",
        "_scalar",
        "_state",
        "dropped",
        "invalid",
        "max_element",
    )

    def __init__(self, max_element: int = DEFAULT_MAX_ELEMENT) -> None:
        if max_element < 1:
            raise ValueError(f"max_element must be positive, got {max_element!r}")
        self.max_element = max_element
        self.dropped = 0
        self.invalid = False
        self._state = _OPEN
        self._closed = False
        # The current element's bytes from earlier chunks (empty while dropping one).
        self._buf = bytearray()
        self._dropping = False
        # Scan state inside the current element, kept across feeds so no byte is rescanned.
        self._depth = 0
        self._in_string = False
        self._escape = False  # the chunk ended right after a backslash inside a string
        self._scalar = False  # a bare number/true/false/null element

    @property
    def ended(self) -> bool:
        """Whether the array's closing ``]`` has arrived."""
        return self._state == _ENDED

    @property
    def pending(self) -> int:
        """Number of buffered bytes of the element in progress."""
        return len(self._buf)

    def feed(self, chunk: bytes) -> list[bytes]:
        """Consume ``chunk`` and return the elements it completed, in stream order."""
        if self._closed:
            raise ValueError("JsonArrayParser.feed() called after close()")
        if not chunk or self.invalid or self._state == _ENDED:
            return []
        data = bytes(chunk) if type(chunk) is not bytes else chunk
        out: list[bytes] = []
        n = len(data)
        i = 0
        # Where the current element starts in this chunk: an element carried over from the
        # previous chunk continues at 0.
        start = 0
        while i < n:
            state = self._state
            if state == _ELEMENT:
                end = self._scan(data, i)
                if end < 0:
                    self._keep(data, start, n)
                    break
                self._finish(data, start, end, out)
                i = end
            elif state == _BETWEEN:
                m = _NOT_SEPARATOR.search(data, i)
                if m is None:
                    break
                i = start = m.start()
                if data[i] == _RBRACKET:
                    self._state = _ENDED
                    break
                self._begin(data[i])
                # A container or string's opening byte is consumed here; a scalar's is not, as
                # its end is searched for from its first byte.
                if not self._scalar:
                    i += 1
                    if i == n:
                        self._keep(data, start, n)
            elif state == _OPEN:
                m = _NOT_SPACE.search(data, i)
                if m is None:
                    break
                if data[m.start()] != _LBRACKET:
                    self.invalid = True
                    break
                self._state = _BETWEEN
                i = m.start() + 1
            else:
                break
        return out

    def close(self) -> list[bytes]:
        """End of input: the unfinished element, if any, as a final (incomplete) one.

        A top-level scalar still waiting for its delimiter is returned here too. Calling
        close() again returns an empty list."""
        if self._closed:
            return []
        self._closed = True
        if self._state != _ELEMENT:
            return []
        # ``ended`` keeps saying whether the closing bracket came: here it did not.
        self._state = _BETWEEN
        if self._dropping:
            self.dropped += 1
            return []
        rest, self._buf = bytes(self._buf), bytearray()
        return [rest] if rest else []

    def _begin(self, first: int) -> None:
        """Start an element whose first byte is ``first``."""
        self._state = _ELEMENT
        self._buf.clear()
        self._dropping = False
        self._escape = False
        self._in_string = first == _QUOTE
        self._scalar = first not in (_QUOTE, _LBRACKET, _LBRACE)
        self._depth = 1 if first in (_LBRACKET, _LBRACE) else 0

    def _scan(self, data: bytes, i: int) -> int:
        """Resume scanning the current element at ``i``: the offset just past its end, or -1
        when ``data`` ends first (the scan state then holds where it stopped)."""
        n = len(data)
        if self._scalar:
            m = _SCALAR_END.search(data, i)
            return -1 if m is None else m.start()
        depth = self._depth
        run, window = 0, _LEAF  # brackets in a row (no string between), the bulk window
        while True:
            if self._in_string:
                if self._escape:
                    if i >= n:
                        break
                    self._escape = False
                    i += 1
                m = _STRING_STOP.search(data, i)
                if m is None:
                    break
                j = m.start()
                if data[j] == _BACKSLASH:
                    if j + 1 >= n:
                        self._escape = True
                        break
                    i = j + 2
                    continue
                self._in_string = False
                i = j + 1
                if depth == 0:
                    return i  # a top-level string element
                continue
            if run < _DENSE:  # one step per bracket: fastest while brackets are few
                m = _STRUCTURE.search(data, i)
                if m is None:
                    break
                j = m.start()
                c = data[j]
                i = j + 1
                if c == _QUOTE:
                    self._in_string = True
                    run = 0
                elif c in (_LBRACKET, _LBRACE):
                    depth += 1
                    run += 1
                else:
                    depth -= 1
                    run += 1
                    if depth <= 0:
                        self._depth = 0
                        return i
                continue
            # Dense brackets: counted in bulk up to the next quote, in windows that double
            # (an element costs its own size, not the chunk's).
            if i >= n:
                break
            hi = min(n, i + window)
            q = data.find(b'"', i, hi)
            end, depth = _close(data, i, hi if q < 0 else q, depth)
            if end >= 0:
                self._depth = 0
                return end
            if q < 0:
                i, window = hi, min(window * 2, _WINDOW)
                continue
            self._in_string = True
            i, run, window = q + 1, 0, _LEAF
        self._depth = depth
        return -1

    def _keep(self, data: bytes, start: int, end: int) -> None:
        """Buffer ``data[start:end]`` of the unfinished element, or drop it past the bound."""
        if self._dropping:
            return
        if len(self._buf) + end - start > self.max_element:
            self._dropping = True
            self._buf = bytearray()
            return
        self._buf += data[start:end]

    def _finish(self, data: bytes, start: int, end: int, out: list[bytes]) -> None:
        """The current element ends at ``end``; emit it unless it is over the bound."""
        self._state = _BETWEEN
        if self._dropping or len(self._buf) + end - start > self.max_element:
            self.dropped += 1
        elif self._buf:
            self._buf += data[start:end]
            out.append(bytes(self._buf))
        else:
            out.append(data[start:end])
        self._buf = bytearray()
        self._dropping = False


def _close(data: bytes, lo: int, hi: int, depth: int, bulk: bool = True) -> tuple[int, int]:
    """In ``data[lo:hi]`` (no quote in it), at ``depth``: the offset just past where the depth
    comes back to 0 and 0, or -1 and the depth at ``hi``. ``bulk``: take pairs out first."""
    brackets = data[lo:hi].translate(_PARENS, _NOT_BRACKET)
    after = depth + len(brackets) - 2 * brackets.count(b")")
    closes = _closes_first(brackets, depth) if bulk else brackets.count(b")")
    if closes is not None and closes < depth:
        return -1, after
    if hi - lo <= _LEAF:
        return _walk(data, lo, hi, depth)
    # It closes in here, or is nested too deep to tell in bulk (its halves will be too).
    bulk = bulk and closes is not None
    mid = (lo + hi) // 2
    end, depth = _close(data, lo, mid, depth, bulk)
    return (end, 0) if end >= 0 else _close(data, mid, hi, depth, bulk)


def _closes_first(brackets: bytes, depth: int) -> int | None:
    """How low the depth goes in ``brackets``: with the pairs inside it taken out, what is
    left is ")))(((", and its closes are that. None if that costs too much to tell; a number
    under ``depth`` is enough to know it stays above 0."""
    budget = _REDUCTIONS * len(brackets)
    while True:
        closes = brackets.count(b")")
        if closes < depth:
            return closes  # taking pairs out never changes how low it goes
        fewer = brackets.replace(b"()", b"")
        if len(fewer) == len(brackets):
            return closes
        budget -= len(brackets)
        if budget < 0:
            return None
        brackets = fewer


def _walk(data: bytes, lo: int, hi: int, depth: int) -> tuple[int, int]:
    """:func:`_close` byte by byte, for a few bytes."""
    for j in range(lo, hi):
        c = data[j]
        if c in (_LBRACKET, _LBRACE):
            depth += 1
        elif c in (_RBRACKET, _RBRACE):
            depth -= 1
            if depth <= 0:
                return j + 1, 0
    return -1, depth
