"""The framing registry (content type -> framing, a stored frame's fields from its bytes) and
Capture storing AWS event streams and NDJSON one row per frame, byte-exact."""

from __future__ import annotations

import itertools
import logging
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ssetape.framing.framings import (
    FRAMINGS,
    Framing,
    frame_fields,
    framing_of,
    framing_of_headers,
)
from ssetape.recording.capture import Capture
from tests.ssetape.framing.test_eventstream import encode_frame, event, flip
from tests.ssetape.recording.sink import Sink

STREAMS = Path("tests/data/real_streams")
EVENTSTREAMS = sorted(STREAMS.glob("*.eventstream"))
NDJSONS = sorted(STREAMS.glob("*.ndjson"))
SSES = sorted(p for p in STREAMS.glob("*.sse") if not p.stem.endswith("_gzip"))
REAL = {Framing.EVENTSTREAM: EVENTSTREAMS, Framing.NDJSON: NDJSONS, Framing.SSE: SSES}


@pytest.fixture(autouse=True)
def quiet_capture() -> None:
    logging.getLogger("ssetape.recording.capture").setLevel(logging.ERROR)


@pytest.mark.parametrize(
    ("ctype", "framing"),
    [
        ("text/event-stream", Framing.SSE),
        ("Text/Event-Stream; charset=utf-8", Framing.SSE),
        ("application/vnd.amazon.eventstream", Framing.EVENTSTREAM),
        ("APPLICATION/VND.AMAZON.EVENTSTREAM", Framing.EVENTSTREAM),
        ("application/x-ndjson", Framing.NDJSON),
        ("application/x-ndjson; charset=utf-8", Framing.NDJSON),
        (" application/jsonl ", Framing.NDJSON),
        ("application/jsonlines;charset=UTF-8", Framing.NDJSON),
        ("application/json", Framing.CHUNKS),
        ("application/json; charset=utf-8", Framing.CHUNKS),
        ("text/plain", Framing.CHUNKS),
        ("", Framing.CHUNKS),
        (None, Framing.CHUNKS),
    ],
)
def test_framing_of_content_type(ctype: str | None, framing: Framing) -> None:
    assert framing_of(ctype) is framing


def test_framing_of_headers_reads_the_content_type_whatever_its_case() -> None:
    headers = [["x-amzn-requestid", "1"], ["Content-Type", "application/vnd.amazon.eventstream"]]
    assert framing_of_headers(headers) is Framing.EVENTSTREAM
    assert framing_of_headers([["server", "ollama"]]) is Framing.CHUNKS
    assert framing_of_headers(None) is Framing.CHUNKS


def test_framing_names_validate() -> None:
    assert [Framing.validate(f.value) for f in Framing] == list(Framing)
    with pytest.raises(ValueError, match=r"unknown framing 'jsonl'.*ndjson"):
        Framing.validate("jsonl")


def capture(
    framing: Framing, chunks: list[bytes], max_event: int = 16 << 20
) -> tuple[Sink, Capture]:
    sink = Sink()
    cap = Capture("u", sink, framing=framing, max_event=max_event)
    for i, c in enumerate(chunks):
        cap.feed(c, 10 * (i + 1))
    cap.close(10 * (len(chunks) + 1))
    return sink, cap


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in itertools.pairwise([0, *points, len(data)])]


def fields(row: dict[str, Any]) -> dict[str, Any]:
    return {"event": row["event"], "data": row["data"], "sse_id": row["sse_id"]}


def parsed(framing: Framing, body: bytes) -> list[tuple[str | None, str | None, bytes]]:
    parser = FRAMINGS[framing].parser(1 << 24)
    return [(f.type, f.data, f.raw) for f in [*parser.feed(body), *parser.close()]]


cuts_st = st.lists(st.integers(0, 1 << 20), max_size=30)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([*EVENTSTREAMS, *NDJSONS]), cuts_st)
def test_capture_stores_one_row_per_frame_byte_exact(path: Path, cuts: list[int]) -> None:
    framing = Framing.EVENTSTREAM if path.suffix == ".eventstream" else Framing.NDJSON
    body = path.read_bytes()
    chunks = chunked(body, cuts)
    sink, cap = capture(framing, chunks)
    assert [(e["event"], e["data"], e["raw"]) for e in sink.events] == parsed(framing, body)
    assert sink.raw() == body
    assert [e["seq"] for e in sink.events] == list(range(len(sink.events)))
    # Each row carries the offset of the chunk that completed it.
    ends = list(itertools.accumulate(map(len, chunks)))
    at = list(itertools.accumulate(len(e["raw"]) for e in sink.events))
    assert [e["offset_us"] for e in sink.events] == [
        10 * (next(i for i, end in enumerate(ends) if end >= a) + 1) for a in at
    ]
    assert (cap.notes, cap.error, cap.gap_seq, cap.not_stored) == ([], None, None, 0)


@settings(max_examples=60, deadline=None)
@given(cuts_st)
def test_an_oversized_ndjson_line_is_counted_not_stored_and_the_next_kept(cuts: list[int]) -> None:
    body = b'{"a":1}\n{"big":"' + b"x" * 500 + b'"}\n{"b":2}\n{"c":3}'
    sink, cap = capture(Framing.NDJSON, chunked(body, cuts), max_event=100)
    assert [e["data"] for e in sink.events] == ['{"a":1}', '{"b":2}', '{"c":3}']
    assert [e["seq"] for e in sink.events] == [0, 1, 2]
    assert cap.not_stored == 1 and cap.gap_seq == 1 and cap.error is None
    assert cap.notes == ["an event over 100 bytes at #1 not stored"]


@settings(max_examples=60, deadline=None)
@given(cuts_st)
def test_an_oversized_eventstream_frame_is_counted_not_stored_and_the_next_kept(
    cuts: list[int],
) -> None:
    a, big, b = event("a", b"{}"), event("big", b"x" * 3000), event("b", b"{}")
    sink, cap = capture(Framing.EVENTSTREAM, chunked(a + big + b, cuts), max_event=1000)
    assert [(e["event"], e["raw"]) for e in sink.events] == [("a", a), ("b", b)]
    assert cap.not_stored == 1 and cap.error is None and cap.gap_seq is not None
    assert len(cap.notes) == 1 and cap.notes[0].startswith("an event over 1000 bytes at #")


A, BIG, B = event("a", b"{}"), event("big", b"x" * 3000), event("b", b"{}")


def test_a_frame_skipped_between_chunks_marks_the_row_after_it() -> None:
    # Replay can send row 0 as it was; row 1 follows a frame it never got.
    _, cap = capture(Framing.EVENTSTREAM, [A + BIG[:100], BIG[100:] + B], max_event=1000)
    assert cap.gap_seq == 1 and cap.notes == ["an event over 1000 bytes at #1 not stored"]


def test_a_frame_skipped_within_a_chunk_marks_the_row_after_it() -> None:
    _, cap = capture(Framing.EVENTSTREAM, [A + BIG + B], max_event=1000)
    assert cap.gap_seq == 1 and cap.notes == ["an event over 1000 bytes at #1 not stored"]


def test_a_gap_in_an_eventstream_leaves_the_rest_stored_unframed_and_exact() -> None:
    a, b, c, d = (event(n, b'{"n":"' + n.encode() + b'"}') for n in "abcd")
    sink = Sink()
    cap = Capture("u", sink, framing=Framing.EVENTSTREAM)
    cap.feed(a + b[:10], 1)
    cap.gap(len(b) - 20, b[-30:-10])  # the middle of b never reached the capture
    after = [b[-10:] + c[:5], c[5:] + d]
    for i, chunk in enumerate(after):
        cap.feed(chunk, 2 + i)
    cap.close(9)
    assert sink.events[0]["raw"] == a and sink.events[0]["event"] == "a"
    rows = sink.events[1:]
    assert b"".join(e["raw"] for e in rows) == b"".join(after)  # no byte lost or made up
    assert {(e["event"], e["data"]) for e in rows} == {(None, None)}
    assert cap.gap_seq == 1 and cap.missing == len(b) - 20 and cap.error is None
    assert any("stored unframed after the gap" in n for n in cap.notes)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 11), cuts_st)
def test_a_corrupt_prelude_is_noted_and_the_rest_stored_exactly(at: int, cuts: list[int]) -> None:
    a, b, c = event("a", b"{}"), event("b", b"{}"), event("c", b"{}")
    body = a + flip(b, at) + c
    sink, cap = capture(Framing.EVENTSTREAM, chunked(body, cuts))
    assert sink.raw() == body
    assert (sink.events[0]["event"], sink.events[0]["raw"]) == ("a", a)
    assert {e["event"] for e in sink.events[1:]} == {None}
    assert len(cap.notes) == 1 and "the rest of the stream is kept unframed" in cap.notes[0]
    assert cap.error is None


def test_a_corrupt_payload_and_a_cut_frame_are_noted_and_kept() -> None:
    a, b, c = event("a", b'{"n":1}'), event("b", b'{"n":2}'), event("c", b'{"n":3}')
    body = a + flip(b, len(b) - 6) + c[:20]
    sink, cap = capture(Framing.EVENTSTREAM, [body[:7], body[7:]])
    assert [(e["event"], e["raw"]) for e in sink.events] == [
        ("a", a), ("b", flip(b, len(b) - 6)), (None, c[:20])
    ]  # fmt: skip
    assert len(cap.notes) == 2
    assert "message checksum" in cap.notes[0] and "ended 20 bytes into a frame" in cap.notes[1]


def test_capture_of_an_exception_frame_stores_its_type() -> None:
    exc = encode_frame(
        [(":exception-type", 7, "throttlingException"), (":message-type", 7, "exception")],
        b'{"message":"slow down"}',
    )
    sink, _ = capture(Framing.EVENTSTREAM, [event("a", b"{}") + exc])
    assert [(e["event"], e["data"]) for e in sink.events] == [
        ("a", "{}"), ("throttlingException", '{"message":"slow down"}')
    ]  # fmt: skip


# Bodies as stored, with damage: each stored row's fields must come back from its bytes.
@settings(max_examples=80, deadline=None)
@given(
    st.sampled_from([f for f in Framing if f is not Framing.CHUNKS]).flatmap(
        lambda f: st.tuples(st.just(f), st.sampled_from(REAL[f]))
    ),
    cuts_st,
)
def test_frame_fields_round_trip_every_stored_row(
    case: tuple[Framing, Path], cuts: list[int]
) -> None:
    framing, path = case
    sink, _ = capture(framing, chunked(path.read_bytes(), cuts))
    for row in sink.events:
        assert frame_fields(row["raw"], framing) == fields(row)


@pytest.mark.xfail(
    strict=True,
    reason="known: an unframed chunk that happens to hold one whole frame gets that frame's "
    "fields back from frame_fields (a cassette stores no fields), though capture stored it "
    "untyped; only after a broken prelude, which no real capture has",
)
def test_frame_fields_round_trip_unframed_eventstream_rows() -> None:
    a, b, c = event("a", b"{}"), event("b", b"{}"), event("c", b"{}")
    chunks = [a + flip(b, 3), c]  # broken at b: c arrives as a chunk of its own
    sink, _ = capture(Framing.EVENTSTREAM, chunks)
    assert [e["event"] for e in sink.events] == ["a", None, None]
    for row in sink.events:
        assert frame_fields(row["raw"], Framing.EVENTSTREAM) == fields(row)


def test_frame_fields_of_bytes_that_are_not_one_frame() -> None:
    assert frame_fields(b'{"a":1}\n{"b":2}\n', Framing.NDJSON) == {}
    assert frame_fields(event("a", b"{}") * 2, Framing.EVENTSTREAM) == {}
    assert frame_fields(b"anything", Framing.CHUNKS) == {}
    assert frame_fields(b'{"a":1}', Framing.NDJSON) == {
        "event": None, "data": '{"a":1}', "sse_id": None
    }  # fmt: skip
