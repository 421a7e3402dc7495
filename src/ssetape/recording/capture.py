"""Capture of one streamed response body: decode, parse, timestamp, hand to the writer.

Runs in the recording process (``ssetape.recording.worker``), fed the chunks the proxy stamped
as it relayed them. It never raises: a stream it cannot parse is recorded as such.

The body is cut into events by its framing (:mod:`ssetape.framing.framings`: SSE, AWS event
streams, NDJSON), or kept as its wire chunks when no framing claims it.

Everything it holds is bounded: an event larger than ``max_event`` bytes is not kept (the
exchange says so and where, and capture resumes at the next event), and a content-encoded
stream is decoded only up to ``max_decoded`` bytes (a small compressed body can inflate to
gigabytes). The wire chunks of an encoded stream are always kept as they came: replay sends
those, byte for byte, even when its events could not all be parsed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ssetape.framing.decoders import Decoder, decoder
from ssetape.framing.framings import FRAMINGS, FrameParser, Framing, ParsedFrame
from ssetape.records import EventSink

log = logging.getLogger("ssetape.recording.capture")

MAX_EVENT = 16 << 20  # bytes of one event
MAX_DECODED = 256 << 20  # bytes an encoded stream is decoded to
MAX_NOTES = 10  # of the framing's problems; past that they are counted


class Capture:
    """Turns the wire chunks of one response into event rows, stamped by the caller.

    Offsets are integer microseconds from the moment the proxy had the whole request; the
    proxy measures them as each chunk passes, so the time spent here does not shift them.
    """

    def __init__(
        self,
        uid: str,
        sink: EventSink,
        *,
        framing: Framing,
        encoding: str = "",
        max_event: int = MAX_EVENT,
        max_decoded: int = MAX_DECODED,
    ) -> None:
        self.uid = uid
        self._sink = sink
        self._spec = FRAMINGS.get(framing)
        self._ends = self._spec.ends if self._spec is not None else ()
        self._longest_end = max(map(len, self._ends), default=0)
        self._max_event = max_event
        self._parser = self._new_parser()
        self._problems = 0
        self._max_decoded = max_decoded
        self._seq = 0
        self._chunk_seq = 0
        self.error: str | None = None  # why it stopped parsing (a capture failure)
        self.notes: list[str] = []  # what else the exchange must say it misses
        self.offset = 0  # of the latest chunk
        self.missing = 0  # bytes that never reached this capture (see gap)
        self.not_stored = 0  # events over max_event: relayed, never stored (lost, counted)
        # The first row replay cannot send as it was (events, or wire chunks when encoded).
        self.gap_seq: int | None = None
        self._skipping = False  # after a gap: until the next event starts
        self._carry = b""  # while skipping: the last bytes before the next chunk
        self._wire = encoding.strip().lower() not in ("", "identity")
        self._decoded = 0
        self.parsing = True  # False once it failed, or stopped at the decoding bound
        self._decoder: Decoder | None = None
        try:
            self._decoder = decoder(encoding)
        except ValueError as e:
            self.fail(f"{e}; the wire bytes are kept")

    def feed(self, data: bytes, offset: int) -> None:
        """One chunk as it arrived ``offset`` µs in; never raises."""
        self.offset = offset
        if not data:
            return
        try:
            if self._wire:
                self._sink.add_chunks(self.uid, [(self._chunk_seq, offset, data)])
                self._chunk_seq += 1
            if not self.parsing:
                return
            if self._decoder is None:
                self._parse(data, offset)
            else:
                self._decode(data, offset)
        except Exception as e:
            self.fail(f"{type(e).__name__}: {e}")

    def gap(self, size: int, tail: bytes) -> None:
        """``size`` bytes of the stream, ending in ``tail``, never arrived: resume at the
        next event (what the parser held is incomplete now), or give up if compressed."""
        self.missing += size
        if self._wire:
            self._mark_gap(self._chunk_seq)
            if self.parsing:
                self.fail(f"{size} bytes of a compressed stream not recorded")
            return
        self._mark_gap(self._seq)
        if self.parsing and self._parser is not None:
            if not self._ends:  # no way to find where the next frame starts
                self.notes.append(f"frames after #{self._seq} stored unframed after the gap")
                self._parser = None
                return
            self._parser = self._new_parser()
            self._skipping, self._carry = True, tail[-self._longest_end :]

    def _new_parser(self) -> FrameParser | None:
        return self._spec.parser(self._max_event) if self._spec is not None else None

    def _mark_gap(self, seq: int) -> None:
        if self.gap_seq is None:
            self.gap_seq = seq

    def _decode(self, data: bytes, offset: int) -> None:
        assert self._decoder is not None
        for piece in self._decoder.feed(data):
            self._decoded += len(piece)
            if self._decoded > self._max_decoded:
                self.notes.append(
                    f"decoded past {self._max_decoded} bytes: events after #{self._seq} not "
                    "parsed (the wire bytes are kept)"
                )
                self.parsing = False  # not a failure: the bound did its job
                self._decoder = None
                return
            self._parse(piece, offset)

    def _parse(self, data: bytes, offset: int) -> None:
        if self._skipping:
            data = self._resync(data)
            if not data:
                return
        parser = self._parser
        if parser is None:
            self._emit_raw(data, offset)
            return
        # Only then can an event be over the bound, or the one still arriving grow past it:
        # what the parser holds after this chunk is at most what it held and the chunk.
        near = parser.pending + len(data) > self._max_event
        events = parser.feed(data)
        if near or parser.skipped:  # (or one the parser passed over be here)
            parser.skipped = 0
            events = self._within_bound(events, offset)
        if events:
            self._emit(events, offset)
        if parser.problems:
            self._drain(parser)
        if near and parser.pending > self._max_event:
            self._oversized()

    def _drain(self, parser: FrameParser) -> None:
        """What the parser found wrong with the bytes it framed."""
        for problem in parser.problems:
            self._problems += 1
            if self._problems <= MAX_NOTES:
                self.notes.append(f"{problem} (#{self._seq})")
        parser.problems.clear()

    def _within_bound(self, events: Sequence[ParsedFrame], offset: int) -> Sequence[ParsedFrame]:
        """``events`` up to the last one over the bound emitted, those over it named; the
        rest, to emit."""
        kept: list[ParsedFrame] = []
        for ev in events:
            if len(ev.raw) > self._max_event or not ev.raw:  # no bytes: passed over
                self._emit(kept, offset)
                kept = []
                self._not_stored()
            else:
                kept.append(ev)
        return kept

    def _not_stored(self) -> None:
        self.not_stored += 1
        self.notes.append(f"an event over {self._max_event} bytes at #{self._seq} not stored")
        if not self._wire:
            self._mark_gap(self._seq)

    def _oversized(self) -> None:
        """An event past the bound still arriving: not kept; capture resumes at the next
        event."""
        assert self._parser is not None
        self._not_stored()
        tail = self._parser.tail(self._longest_end)
        self._parser = self._new_parser()
        self._skipping, self._carry = True, tail

    def _resync(self, data: bytes) -> bytes:
        """What follows the first event end in the bytes seen since the gap (its last ones
        included, so an end split across chunks is found); nothing until there is one."""
        seen = self._carry + data
        ends = [i + len(sep) for sep in self._ends if (i := seen.find(sep)) >= 0]
        if not ends:
            self._carry = seen[-self._longest_end :]
            return b""
        self._skipping, self._carry = False, b""
        return seen[min(ends) :]

    def close(self, offset: int) -> None:
        """End of stream (clean or not) at ``offset``: flush what the parser still holds."""
        if self._parser is None or not self.parsing:
            return
        try:
            self._emit(self._parser.close(), offset)
            self._drain(self._parser)
            if self._problems > MAX_NOTES:
                self.notes.append(f"{self._problems - MAX_NOTES} more framing problems")
        except Exception as e:
            self.fail(f"{type(e).__name__}: {e}")

    def _emit(self, events: Sequence[ParsedFrame], offset: int) -> None:
        if not events:
            return
        seq = self._seq
        if len(events) == 1:  # one event per chunk: how an API's tokens arrive
            ev = events[0]
            rows = [(seq, offset, ev.type, ev.data, ev.id, ev.raw)]
        else:
            rows = [
                (seq + i, offset, ev.type, ev.data, ev.id, ev.raw) for i, ev in enumerate(events)
            ]
        self._seq = seq + len(rows)
        self._sink.add_events(self.uid, rows)

    def _emit_raw(self, data: bytes, offset: int) -> None:
        self._sink.add_events(self.uid, [(self._seq, offset, None, None, None, data)])
        self._seq += 1

    def fail(self, message: str) -> None:
        self.error = f"capture failed: {message}"
        self.parsing = False
        if not self._wire:  # the events are what replay sends: it stops here
            self._mark_gap(self._seq)
        log.warning("ssetape: %s (exchange %s); traffic continues", self.error, self.uid)
