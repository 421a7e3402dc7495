from __future__ import annotations

import gzip
import zlib

from ssetape.capture import Capture

STREAM = b'data: {"a":1}\n\n: keep-alive\n\ndata: {"a":2}\n\ndata: [DONE]\n\n'


class Sink:
    def __init__(self) -> None:
        self.events: list[dict[str, object]] = []
        self.chunks: list[dict[str, object]] = []

    def add_events(self, uid: str, rows: list[dict[str, object]]) -> None:
        self.events += rows

    def add_chunks(self, uid: str, rows: list[dict[str, object]]) -> None:
        self.chunks += rows


def test_chunks_pass_unchanged_and_events_get_offsets() -> None:
    now = [100.0]
    sink = Sink()
    cap = Capture("u", 100.0, sink, sse=True, clock=lambda: now[0])
    out = []
    for i, piece in enumerate([STREAM[:5], STREAM[5:20], STREAM[20:]]):
        now[0] = 100.0 + 0.01 * (i + 1)
        out.append(cap(piece))
    cap.close()
    assert b"".join(out) == STREAM
    assert b"".join(e["raw"] for e in sink.events) == STREAM  # type: ignore[misc]
    assert [e["event"] for e in sink.events] == ["message", None, "message", "message"]
    assert [e["seq"] for e in sink.events] == [0, 1, 2, 3]
    assert [e["offset_us"] for e in sink.events] == [20000, 30000, 30000, 30000]
    assert cap.event_count == 4 and cap.first_event_us == 20000


def test_gzip_is_decoded_for_parsing_and_wire_chunks_are_kept() -> None:
    co = zlib.compressobj(wbits=16 + zlib.MAX_WBITS)
    wire = [co.compress(STREAM[:18]) + co.flush(zlib.Z_SYNC_FLUSH), co.compress(STREAM[18:])]
    wire.append(co.flush())
    assert gzip.decompress(b"".join(wire)) == STREAM
    sink = Sink()
    cap = Capture("u", 0.0, sink, sse=True, encoding="gzip")
    assert [cap(w) for w in wire] == wire
    cap.close()
    assert b"".join(c["data"] for c in sink.chunks) == b"".join(wire)  # type: ignore[misc]
    assert b"".join(e["raw"] for e in sink.events) == STREAM  # type: ignore[misc]


def test_a_broken_stream_never_breaks_the_bytes() -> None:
    sink = Sink()
    cap = Capture("u", 0.0, sink, sse=True, encoding="gzip")
    garbage = b"this is not gzip at all"
    assert cap(garbage) == garbage
    assert cap(b"more") == b"more"
    assert cap.error is not None and "capture failed" in cap.error
    cap.close()


def test_unknown_encoding_is_reported_not_raised() -> None:
    cap = Capture("u", 0.0, Sink(), sse=True, encoding="snappy")
    assert cap(b"data: x\n\n") == b"data: x\n\n"
    assert cap.error is not None and "snappy" in cap.error


def test_non_sse_stream_keeps_chunks_as_records() -> None:
    sink = Sink()
    cap = Capture("u", 0.0, sink, sse=False)
    cap(b'{"a":1}\n')
    cap(b'{"b":2}\n')
    cap.close()
    assert [e["raw"] for e in sink.events] == [b'{"a":1}\n', b'{"b":2}\n']
    assert {e["event"] for e in sink.events} == {None}
