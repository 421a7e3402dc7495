"""Incremental, lossless Server-Sent Events parser.

Parsing follows the WHATWG HTML "server-sent events" rules, with two adaptations for recording:

* every block up to a blank line is emitted, including comment-only keep-alives, so replay can
  reproduce their timing;
* every input byte ends up in exactly one event's ``raw``, so the recorded body is byte-exact.

Results never depend on how the stream is chunked: a block is only emitted once its terminating
blank line is unambiguous (a trailing CR might still be the first half of a CRLF).
"""

import re
from dataclasses import dataclass, fields

__all__ = ["SseEvent", "SseParser"]

_BOM = b"\xef\xbb\xbf"
_CR = 0x0D
_LF = 0x0A

# Cached search result meaning "not looked up yet"; below every offset, so it always triggers a
# lookup, and distinct from find()'s -1 "absent".
_UNKNOWN = -2
_LINE_END = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True, slots=True)
class SseEvent:
    """One block of an SSE stream: its exact bytes and the fields parsed from them."""

    raw: bytes
    event: str | None
    data: str | None
    id: str | None
    retry: int | None
    comments: tuple[str, ...]
    complete: bool

    @property
    def type(self) -> str | None:
        """The type an EventSource would dispatch, or None when it would dispatch nothing."""
        if self.data is None:
            return None
        return self.event or "message"


# A frozen dataclass's __init__ assigns each field through object.__setattr__, which costs about
# as much as parsing a typical event; the parser fills the slots through their descriptors.
(
    _set_raw,
    _set_event,
    _set_data,
    _set_id,
    _set_retry,
    _set_comments,
    _set_complete,
) = (getattr(SseEvent, f.name).__set__ for f in fields(SseEvent))
_new = object.__new__


def _parse(raw: bytes, text: str, complete: bool) -> SseEvent:
    """Build the event for one block; ``text`` is the block's lines without the blank line."""
    event: str | None = None
    data: str | None = None
    id_: str | None = None
    retry: int | None = None
    comments: tuple[str, ...] = ()
    if text.startswith("data: ") and "\n" not in text and "\r" not in text:
        # The typical OpenAI-style block is a single data line.
        data = text[6:]
    elif text:
        data_lines: list[str] | None = None
        comment_lines: list[str] | None = None
        # Line ends are ASCII, so decoding a whole block gives the same text as decoding line
        # by line; splitting on "\n" alone is the common case.
        for line in _LINE_END.split(text) if "\r" in text else text.split("\n"):
            # The two usual fields get a cheaper path than the general field split below.
            if line.startswith("data: "):
                if data_lines is None:
                    data_lines = [line[6:]]
                else:
                    data_lines.append(line[6:])
                continue
            if line.startswith("event: "):
                event = line[7:]
                continue
            if not line:
                # Only the unterminated tail given to close() ends with a line end; complete
                # blocks hold no empty line before their blank line.
                continue
            if line[0] == ":":
                if comment_lines is None:
                    comment_lines = []
                comment_lines.append(line[2:] if line.startswith(" ", 1) else line[1:])
                continue
            name, _, value = line.partition(":")
            if value[:1] == " ":
                value = value[1:]
            if name == "data":
                if data_lines is None:
                    data_lines = [value]
                else:
                    data_lines.append(value)
            elif name == "event":
                event = value
            elif name == "id" and "\0" not in value:
                id_ = value
            elif name == "retry" and value.isascii() and value.isdigit():
                # isascii() too because isdigit() alone accepts non-ASCII digits such as "²".
                retry = int(value)
        if data_lines is not None:
            data = data_lines[0] if len(data_lines) == 1 else "\n".join(data_lines)
        if comment_lines is not None:
            comments = tuple(comment_lines)
    ev: SseEvent = _new(SseEvent)
    _set_raw(ev, raw)
    _set_event(ev, event)
    _set_data(ev, data)
    _set_id(ev, id_)
    _set_retry(ev, retry)
    _set_comments(ev, comments)
    _set_complete(ev, complete)
    return ev


class SseParser:
    """Split a byte stream into :class:`SseEvent` blocks, chunk by chunk.

    ``b"".join(e.raw for e in events)`` over everything returned by :meth:`feed` and
    :meth:`close` equals the input, and the events are the same however the input is split.
    """

    __slots__ = ("_buf", "_closed", "_first", "_scan")

    def __init__(self) -> None:
        # Bytes not yet emitted; always starts at the beginning of a block.
        self._buf = bytearray()
        # Offset in _buf where the blank-line search resumes, so a large event arriving in many
        # small chunks is scanned once instead of from its start on every chunk.
        self._scan = 0
        # True until the first block is emitted: only the stream's very start may hold a BOM.
        self._first = True
        self._closed = False

    @property
    def pending(self) -> int:
        """Number of buffered bytes not yet emitted."""
        return len(self._buf)

    def tail(self, n: int) -> bytes:
        """The last ``n`` buffered bytes (where the caller would look for an event end)."""
        return bytes(self._buf[-n:]) if n > 0 else b""

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """Consume ``chunk`` and return the blocks it completed, in stream order."""
        if self._closed:
            raise ValueError("SseParser.feed() called after close()")
        if not chunk:
            return []
        if type(chunk) is not bytes:
            # Tolerate bytearray/memoryview: raw must be immutable bytes, and the searches
            # below need bytes semantics (a memoryview has no find()).
            chunk = bytes(chunk)
        buf = self._buf
        if buf:
            # find(), not ``in``: on bytes, ``in`` first tries its operand as an int (and
            # makes, then drops, the TypeError), which costs more than the search.
            if buf[-1] != _CR and chunk.find(b"\n") < 0 and chunk.find(b"\r") < 0:
                # Without a line end this chunk cannot complete a block (unless a trailing CR
                # was waiting for it), and the search position stays valid.
                buf += chunk
                return []
            buf += chunk
            events, pos, scan = self._split(buf, self._scan, final=False)
            if pos:
                del buf[:pos]
        else:
            end = len(chunk) - 2
            if (
                end > 0
                and chunk.find(b"\n\n") == end
                and chunk[0] != _LF
                and chunk.find(b"\r") < 0
                and not (self._first and chunk.startswith(_BOM))
            ):
                # The usual chunk of an API's stream: exactly one event, its one blank line
                # last, no CR anywhere; what _split would make of it, without its scans.
                self._first = False
                return [_parse(chunk, chunk[:end].decode("utf-8", "replace"), complete=True)]
            # Fast path for the usual case of whole events per chunk: work on the chunk itself,
            # which lets a block spanning the entire chunk reuse it as ``raw`` without copying.
            events, pos, scan = self._split(chunk, 0, final=False)
            if pos < len(chunk):
                buf += chunk[pos:] if pos else chunk
        self._scan = scan - pos
        return events

    def close(self) -> list[SseEvent]:
        """End of stream: return the remaining blocks, the last one possibly incomplete.

        Leftover bytes without a terminating blank line (a partial line, a lone comment, stray
        whitespace...) become a final event with ``complete=False``; its lines, including an
        unterminated last one, are still parsed so that e.g. a missing final newline after
        ``data: [DONE]`` keeps its data. Calling close() again returns an empty list.
        """
        if self._closed:
            return []
        self._closed = True
        buf = self._buf
        self._buf = bytearray()
        self._scan = 0
        if not buf:
            return []
        events, pos, _ = self._split(buf, 0, final=True)
        if pos < len(buf):
            start = pos + 3 if self._first and buf.startswith(_BOM) else pos
            text = buf[start:].decode("utf-8", "replace")
            events.append(_parse(bytes(buf[pos:]), text, complete=False))
        return events

    def _split(
        self, data: bytes | bytearray, scan: int, final: bool
    ) -> tuple[list[SseEvent], int, int]:
        """Emit all complete blocks of ``data``.

        Returns the events, the offset just past the last emitted block, and where the next
        blank-line search may start. ``final`` means no more bytes will follow, so a trailing
        CR is a line end on its own.
        """
        events: list[SseEvent] = []
        n = len(data)
        pos = 0
        # A blank line is a line end directly followed by another, so each one shows up as one
        # of the byte pairs LF LF, LF CR or CR CR (a CRLF's CR is followed by LF, never by CR),
        # at the offset of the first line end's last byte. Those are found with bytes.find, which
        # is far faster than a regex; the next hit of each pair is cached (_UNKNOWN until looked
        # up, -1 when absent) so a buffer holding many blocks is scanned only once. CR-free
        # streams, the common case, skip the two CR pairs after a single failed find.
        lf_lf = lf_cr = cr_cr = next_cr = _UNKNOWN
        find = data.find
        # Skipped by parsing but kept in raw. It can only lead the first block, which then
        # necessarily starts at offset 0.
        bom = 3 if self._first and data.startswith(_BOM) else 0
        while pos < n:
            start = pos + bom
            if start >= n:
                break
            first = data[start]
            if first in (_LF, _CR):
                # The block's first line is empty: the block is just that blank line.
                if first == _LF:
                    end = start + 1
                elif start + 1 < n:
                    end = start + 2 if data[start + 1] == _LF else start + 1
                elif final:
                    end = start + 1
                else:
                    break
                content_end = start
            else:
                s = scan if scan > start else start
                if lf_lf != -1 and lf_lf < s:
                    lf_lf = find(b"\n\n", s)
                if next_cr != -1 and next_cr < s:
                    next_cr = find(b"\r", s)
                p = lf_lf
                if next_cr != -1:
                    if lf_cr != -1 and lf_cr < s:
                        lf_cr = find(b"\n\r", s)
                    if cr_cr != -1 and cr_cr < s:
                        cr_cr = find(b"\r\r", s)
                    if lf_cr != -1 and (p == -1 or lf_cr < p):
                        p = lf_cr
                    if cr_cr != -1 and (p == -1 or cr_cr < p):
                        p = cr_cr
                if p == -1:
                    # Every pair starting before the last byte has been ruled out.
                    scan = max(start, n - 1)
                    break
                content_end = p
                end = p + 2
                if data[p + 1] == _CR:
                    if end < n:
                        if data[end] == _LF:
                            end += 1
                    elif not final:
                        # This CR may be half of a CRLF whose LF belongs to this block: wait for
                        # the next byte so the result does not depend on chunking.
                        scan = p
                        break
                if data[p] == _LF and data[p - 1] == _CR:
                    content_end -= 1
            # A full slice of an exact bytes object is the object itself, not a copy.
            raw = data[pos:end] if isinstance(data, bytes) else bytes(data[pos:end])
            text = data[start:content_end].decode("utf-8", "replace") if content_end > start else ""
            events.append(_parse(raw, text, complete=True))
            pos = scan = end
            bom = 0
        if events:
            self._first = False
        return events, pos, max(scan, pos)
