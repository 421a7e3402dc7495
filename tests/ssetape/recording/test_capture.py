from __future__ import annotations

import gzip
import zlib

from ssetape.framing.framings import Framing
from ssetape.recording.capture import Capture
from tests.ssetape.recording.sink import Sink

STREAM = b'data: {"a":1}\n\n: keep-alive\n\ndata: {"a":2}\n\ndata: [DONE]\n\n'


def test_events_get_the_offset_of_the_chunk_that_completed_them() -> None:
    sink = Sink()
    cap = Capture("u", sink, framing=Framing.SSE)
    for i, piece in enumerate([STREAM[:5], STREAM[5:20], STREAM[20:]]):
        cap.feed(piece, 10_000 * (i + 1))
    cap.close(40_000)
    assert b"".join(e["raw"] for e in sink.events) == STREAM  # type: ignore[misc]
    assert [e["event"] for e in sink.events] == ["message", None, "message", "message"]
    assert [e["seq"] for e in sink.events] == [0, 1, 2, 3]
    assert [e["offset_us"] for e in sink.events] == [20000, 30000, 30000, 30000]


def test_gzip_is_decoded_for_parsing_and_wire_chunks_are_kept() -> None:
    co = zlib.compressobj(wbits=16 + zlib.MAX_WBITS)
    wire = [co.compress(STREAM[:18]) + co.flush(zlib.Z_SYNC_FLUSH), co.compress(STREAM[18:])]
    wire.append(co.flush())
    assert gzip.decompress(b"".join(wire)) == STREAM
    sink = Sink()
    cap = Capture("u", sink, framing=Framing.SSE, encoding="gzip")
    for w in wire:
        cap.feed(w, 1)
    cap.close(2)
    assert b"".join(c["data"] for c in sink.chunks) == b"".join(wire)  # type: ignore[misc]
    assert b"".join(e["raw"] for e in sink.events) == STREAM  # type: ignore[misc]


def test_a_broken_stream_is_reported_not_raised() -> None:
    sink = Sink()
    cap = Capture("u", sink, framing=Framing.SSE, encoding="gzip")
    cap.feed(b"this is not gzip at all", 1)
    cap.feed(b"more", 2)
    assert cap.error is not None and "capture failed" in cap.error
    cap.close(3)


def test_unknown_encoding_is_reported_not_raised() -> None:
    cap = Capture("u", Sink(), framing=Framing.SSE, encoding="snappy")
    cap.feed(b"data: x\n\n", 1)
    assert cap.error is not None and "snappy" in cap.error


def test_non_sse_stream_keeps_chunks_as_records() -> None:
    sink = Sink()
    cap = Capture("u", sink, framing=Framing.CHUNKS)
    cap.feed(b'{"a":1}\n', 1)
    cap.feed(b'{"b":2}\n', 2)
    cap.close(3)
    assert [e["raw"] for e in sink.events] == [b'{"a":1}\n', b'{"b":2}\n']
    assert {e["event"] for e in sink.events} == {None}


def test_after_a_gap_capture_resumes_at_the_next_event() -> None:
    """Chunks the proxy had to drop (the recording process fell behind) leave a hole: the
    event it cut is lost, the ones after it are captured whole."""
    sink = Sink()
    cap = Capture("u", sink, framing=Framing.SSE)
    cap.feed(b"data: 1\n\ndata: 2 starts", 1)
    cap.gap(100, b"..2 continues")  # the dropped bytes ended mid-event
    cap.feed(b" and ends\n\ndata: 3\n\n", 3)
    cap.gap(50, b"\n\n")  # these ended exactly at an event's end
    cap.feed(b"data: 5\n\n", 5)
    cap.gap(10, b"data: 6 ...\n")  # an event end split across the hole and the next chunk
    cap.feed(b"\ndata: 7\n\n", 7)
    cap.close(8)
    assert [(e["data"], e["offset_us"]) for e in sink.events] == [
        ("1", 1), ("3", 3), ("5", 5), ("7", 7)
    ]  # fmt: skip
    assert [e["seq"] for e in sink.events] == [0, 1, 2, 3]
    assert cap.missing == 160 and cap.error is None


def test_a_gap_in_a_compressed_stream_ends_its_capture() -> None:
    co = zlib.compressobj(wbits=16 + zlib.MAX_WBITS)
    wire = co.compress(STREAM) + co.flush()
    sink = Sink()
    cap = Capture("u", sink, framing=Framing.SSE, encoding="gzip")
    cap.feed(wire[:10], 1)
    cap.gap(5, wire[10:15])
    cap.feed(wire[15:], 2)
    assert cap.error is not None and "compressed" in cap.error and cap.missing == 5


def test_an_event_over_the_bound_is_not_kept_and_capture_goes_on() -> None:
    sink = Sink()
    cap = Capture("u", sink, framing=Framing.SSE, max_event=1 << 20)
    cap.feed(b"data: 1\n\n", 1)
    for i in range(10):  # a 10 MiB line that never ends
        cap.feed(b"x" * (1 << 20), 2 + i)
    cap.feed(b"y\n\ndata: 2\n\n", 20)
    cap.close(30)
    assert [e["data"] for e in sink.events] == ["1", "2"]
    assert cap.gap_seq == 1  # replay stops after the first event: what follows is not it
    assert cap.error is None and cap.notes == [f"an event over {1 << 20} bytes at #1 not stored"]
    assert cap._parser is not None and cap._parser.pending == 0  # nothing of it held


def test_an_event_over_the_bound_that_arrives_whole_is_not_kept_either() -> None:
    sink = Sink()
    cap = Capture("u", sink, framing=Framing.SSE, max_event=1024)
    cap.feed(b"data: 1\n\ndata: " + b"x" * 2000 + b"\n\ndata: 3\n\n", 1)
    cap.feed(b"data: " + b"y" * 600, 2)  # over the bound only once it completes
    cap.feed(b"y" * 600 + b"\n\ndata: 5\n\n", 3)
    cap.close(4)
    assert [e["data"] for e in sink.events] == ["1", "3", "5"]
    assert [e["seq"] for e in sink.events] == [0, 1, 2]
    assert cap.notes == [f"an event over 1024 bytes at #{n} not stored" for n in (1, 2)]
    assert cap.gap_seq == 1


def test_a_decompression_bomb_is_decoded_only_to_the_bound() -> None:
    co = zlib.compressobj(9, zlib.DEFLATED, 31)
    head = co.compress(b"data: 1\n\n") + co.flush(zlib.Z_SYNC_FLUSH)
    bomb = b"".join(co.compress(bytes(1 << 20)) for _ in range(256)) + co.flush()  # 256 MiB
    sink = Sink()
    cap = Capture(
        "u", sink, framing=Framing.SSE, encoding="gzip", max_event=1 << 20, max_decoded=8 << 20
    )
    cap.feed(head, 1)
    for i in range(0, len(bomb), 4096):
        cap.feed(bomb[i : i + 4096], 2)
    cap.close(3)
    assert [e["data"] for e in sink.events] == ["1"]
    # Every wire byte is kept (replay sends those), none of the inflated output.
    assert b"".join(c["data"] for c in sink.chunks) == head + bomb  # type: ignore[misc]
    assert cap.error is None and cap.gap_seq is None
    assert any(n.startswith(f"decoded past {8 << 20} bytes") for n in cap.notes)
