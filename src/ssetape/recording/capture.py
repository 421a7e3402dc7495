"""Capture of one streamed response body: decode, parse, timestamp, hand to the writer.

Runs in the recording process (``ssetape.recording.worker``), fed the chunks the proxy stamped
as it relayed them. It never raises: a stream it cannot parse is recorded as such.
"""

from __future__ import annotations

import logging

from ssetape.decoders import Decoder, decoder
from ssetape.records import EventSink
from ssetape.sse import SseEvent, SseParser

log = logging.getLogger("ssetape.recording.capture")


# A blank line ends an SSE event, whichever line ends the server uses.
_EVENT_ENDS = (b"\n\n", b"\r\r", b"\r\n\r\n")
_LONGEST_END = 4


class Capture:
    """Turns the wire chunks of one response into event rows, stamped by the caller.

    Offsets are integer microseconds from the moment the proxy had the whole request; the
    proxy measures them as each chunk passes, so the time spent here does not shift them.
    """

    def __init__(self, uid: str, sink: EventSink, *, sse: bool, encoding: str = "") -> None:
        self.uid = uid
        self._sink = sink
        self._parser = SseParser() if sse else None
        self._seq = 0
        self._chunk_seq = 0
        self.error: str | None = None
        self.offset = 0  # of the latest chunk
        self.missing = 0  # bytes that never reached this capture (see gap)
        self.gap_seq: int | None = None  # the first event the missing bytes belonged to
        self._skipping = False  # after a gap: until the next event starts
        self._carry = b""  # while skipping: the last bytes before the next chunk
        self._decoder: Decoder | None = None
        try:
            self._decoder = decoder(encoding)
        except ValueError as e:
            self.fail(str(e))

    def feed(self, data: bytes, offset: int) -> None:
        """One chunk as it arrived ``offset`` µs in; never raises."""
        self.offset = offset
        if data and self.error is None:
            try:
                self._feed(data, offset)
            except Exception as e:
                self.fail(f"{type(e).__name__}: {e}")

    def gap(self, size: int, tail: bytes) -> None:
        """``size`` bytes of the stream, ending in ``tail``, never arrived: resume at the
        next event (what the parser held is incomplete now), or give up if compressed."""
        self.missing += size
        if self.gap_seq is None:
            self.gap_seq = self._seq
        if self.error is not None:
            return
        if self._decoder is not None:
            self.fail(f"{size} bytes of a compressed stream not recorded")
        elif self._parser is not None:
            self._parser = SseParser()
            self._skipping, self._carry = True, tail[-_LONGEST_END:]

    def _feed(self, data: bytes, offset: int) -> None:
        if self._skipping:
            data = self._resync(data)
            if not data:
                return
        if self._decoder is not None:
            self._sink.add_chunks(self.uid, [(self._chunk_seq, offset, data)])
            self._chunk_seq += 1
            data = self._decoder.decompress(data)
            if not data:
                return
        if self._parser is None:
            self._emit_raw(data, offset)
        else:
            self._emit(self._parser.feed(data), offset)

    def _resync(self, data: bytes) -> bytes:
        """What follows the first event end in the bytes seen since the gap (its last ones
        included, so an end split across chunks is found); nothing until there is one."""
        seen = self._carry + data
        ends = [i + len(sep) for sep in _EVENT_ENDS if (i := seen.find(sep)) >= 0]
        if not ends:
            self._carry = seen[-_LONGEST_END:]
            return b""
        self._skipping, self._carry = False, b""
        return seen[min(ends) :]

    def close(self, offset: int) -> None:
        """End of stream (clean or not) at ``offset``: flush what the parser still holds."""
        if self._parser is None or self.error is not None:
            return
        try:
            self._emit(self._parser.close(), offset)
        except Exception as e:
            self.fail(f"{type(e).__name__}: {e}")

    def _emit(self, events: list[SseEvent], offset: int) -> None:
        if not events:
            return
        seq = self._seq
        rows = [(seq + i, offset, ev.type, ev.data, ev.id, ev.raw) for i, ev in enumerate(events)]
        self._seq = seq + len(rows)
        self._sink.add_events(self.uid, rows)

    def _emit_raw(self, data: bytes, offset: int) -> None:
        self._sink.add_events(self.uid, [(self._seq, offset, None, None, None, data)])
        self._seq += 1

    def fail(self, message: str) -> None:
        self.error = f"capture failed: {message}"
        if self.gap_seq is None:
            self.gap_seq = self._seq
        log.warning("ssetape: %s (exchange %s); traffic continues unrecorded", self.error, self.uid)
