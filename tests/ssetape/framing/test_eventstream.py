"""EventStreamParser: AWS event-stream frames (Amazon Bedrock), checked frame for frame against
botocore's own parser, for the real captures and for frames built here."""

from __future__ import annotations

import itertools
import struct
import zlib
from pathlib import Path

import orjson
import pytest
from botocore.eventstream import (  # type: ignore[import-untyped]
    ChecksumMismatch,
    EventStreamBuffer,
    EventStreamMessage,
    InvalidPayloadLength,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from ssetape.framing.eventstream import EventStreamParser, Frame, FrameCounter, decode_headers

REAL = sorted(Path("tests/data/real_streams").glob("*.eventstream"))
Value = bool | int | bytes | str
Header = tuple[str, int, Value]
_INTS = {2: 1, 3: 2, 4: 4, 5: 8, 8: 8}  # value type -> width of its signed big-endian int


def encode_header(name: str, kind: int, value: Value) -> bytes:
    n = name.encode()
    out = bytes([len(n)]) + n + bytes([kind])
    if kind in (0, 1):
        return out
    if kind in _INTS:
        assert isinstance(value, int)
        return out + value.to_bytes(_INTS[kind], "big", signed=True)
    data = value.encode() if isinstance(value, str) else value
    assert isinstance(data, bytes)
    if kind == 9:
        return out + data
    return out + len(data).to_bytes(2, "big") + data


def encode_frame(headers: list[Header], payload: bytes) -> bytes:
    """A frame as AWS sends it: prelude, its CRC, headers, payload, message CRC."""
    block = b"".join(encode_header(*h) for h in headers)
    prelude = struct.pack(">II", 16 + len(block) + len(payload), len(block))
    body = prelude + struct.pack(">I", zlib.crc32(prelude)) + block + payload
    return body + struct.pack(">I", zlib.crc32(body))


def event(name: str, payload: bytes) -> bytes:
    return encode_frame(
        [
            (":event-type", 7, name),
            (":content-type", 7, "application/json"),
            (":message-type", 7, "event"),
        ],
        payload,
    )


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in itertools.pairwise([0, *points, len(data)])]


def parse(
    chunks: list[bytes], max_frame: int | None = None
) -> tuple[list[Frame], EventStreamParser]:
    p = EventStreamParser() if max_frame is None else EventStreamParser(max_frame)
    out: list[Frame] = []
    for c in chunks:
        out += p.feed(c)
        if max_frame is not None:
            assert p.pending <= max_frame  # an oversized frame is never buffered
    return out + p.close(), p


def botocore_messages(body: bytes) -> list[EventStreamMessage]:
    buf = EventStreamBuffer()
    buf.add_data(body)
    return list(buf)


def assert_same_as_botocore(body: bytes, frames: list[Frame]) -> None:
    msgs = botocore_messages(body)
    assert len(frames) == len(msgs)
    at = 0
    for frame, msg in zip(frames, msgs, strict=True):
        assert frame.raw == body[at : at + msg.prelude.total_length]
        at += msg.prelude.total_length
        assert decode_headers(frame.raw[12 : msg.prelude.headers_end]) == msg.headers
        assert frame.data == msg.payload.decode()
    assert at == len(body)


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.stem)
def test_real_captures_match_botocore_frame_for_frame(path: Path) -> None:
    body = path.read_bytes()
    frames, p = parse([body])
    assert_same_as_botocore(body, frames)
    msgs = botocore_messages(body)
    assert [f.type for f in frames] == [m.headers[":event-type"] for m in msgs]
    assert all(isinstance(orjson.loads(f.data or ""), dict) for f in frames)
    assert p.problems == [] and p.skipped == 0 and p.pending == 0


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(REAL), st.lists(st.integers(0, 1 << 20), max_size=40))
def test_real_captures_parse_the_same_however_chunked(path: Path, cuts: list[int]) -> None:
    body = path.read_bytes()
    frames, p = parse(chunked(body, cuts))
    assert frames == parse([body])[0]
    assert b"".join(f.raw for f in frames) == body
    assert p.problems == []


def test_every_header_value_type_decodes_as_botocore_decodes_it() -> None:
    headers: list[Header] = [
        ("yes", 0, True),
        ("no", 1, False),
        ("byte", 2, -7),
        ("short", 3, -300),
        ("int", 4, 70000),
        ("long", 5, -(1 << 40)),
        ("blob", 6, b"\x00\xffbin"),
        ("str", 7, "café ☕"),
        ("ts", 8, 1_700_000_000_000),
        ("uuid", 9, bytes(range(16))),
        (":event-type", 7, "messageStart"),
    ]
    raw = encode_frame(headers, b'{"role":"assistant"}')
    want = {name: value for name, _, value in headers}
    assert decode_headers(raw[12:-24]) == want == botocore_messages(raw)[0].headers
    frames, p = parse([raw])
    assert frames == [Frame(raw, "messageStart", '{"role":"assistant"}')] and p.problems == []


_VALUES = {
    0: st.just(True),
    1: st.just(False),
    2: st.integers(-(1 << 7), (1 << 7) - 1),
    3: st.integers(-(1 << 15), (1 << 15) - 1),
    4: st.integers(-(1 << 31), (1 << 31) - 1),
    5: st.integers(-(1 << 63), (1 << 63) - 1),
    6: st.binary(max_size=40),
    7: st.text(max_size=30),
    8: st.integers(-(1 << 63), (1 << 63) - 1),
    9: st.binary(min_size=16, max_size=16),
}
header = st.integers(0, 9).flatmap(
    lambda k: st.tuples(st.text(min_size=1, max_size=12), st.just(k), _VALUES[k])
)
frame_spec = st.tuples(st.lists(header, max_size=8, unique_by=lambda h: h[0]), st.text(max_size=60))


@settings(max_examples=80, deadline=None)
@given(st.lists(frame_spec, min_size=1, max_size=6), st.lists(st.integers(0, 4000), max_size=12))
def test_built_frames_match_botocore_for_any_chunking(
    specs: list[tuple[list[Header], str]], cuts: list[int]
) -> None:
    body = b"".join(encode_frame(h, text.encode()) for h, text in specs)
    frames, p = parse(chunked(body, cuts))
    assert_same_as_botocore(body, frames)
    assert p.problems == [] and frames == parse([body])[0]


def test_exception_frames_are_named_by_their_exception_type() -> None:
    payload = b'{"message":"Too many requests, please wait before trying again."}'
    raw = encode_frame(
        [
            (":exception-type", 7, "throttlingException"),
            (":content-type", 7, "application/json"),
            (":message-type", 7, "exception"),
        ],
        payload,
    )
    body = event("messageStart", b'{"role":"assistant"}') + raw
    frames, p = parse([body])
    assert [f.type for f in frames] == ["messageStart", "throttlingException"]
    assert frames[1] == Frame(raw, "throttlingException", payload.decode())
    assert botocore_messages(body)[1].to_response_dict()["status_code"] == 400
    assert p.problems == []


def test_error_frames_are_named_by_their_code_and_say_their_message() -> None:
    bare = encode_frame(
        [
            (":error-code", 7, "InternalFailure"),
            (":error-message", 7, 'An internal "error" occurred'),
            (":message-type", 7, "error"),
        ],
        b"",
    )
    with_payload = encode_frame(
        [(":error-code", 7, "Oops"), (":message-type", 7, "error")], b'{"detail":1}'
    )
    frames, p = parse([bare + with_payload])
    assert frames[0].type == "InternalFailure"
    assert orjson.loads(frames[0].data or "") == {"message": 'An internal "error" occurred'}
    assert (frames[1].type, frames[1].data) == ("Oops", '{"detail":1}')
    assert p.problems == []


def test_a_frame_without_a_message_type_is_an_event_and_an_unnamed_one_has_no_type() -> None:
    plain = encode_frame([(":event-type", 7, "chunk")], b"{}")
    unnamed = encode_frame([(":message-type", 7, "event")], b"{}")
    empty_name = encode_frame([(":event-type", 7, "")], b"{}")
    frames, _ = parse([plain + unnamed + empty_name])
    assert [f.type for f in frames] == ["chunk", None, None]


def flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]


def test_a_corrupt_payload_is_reported_and_kept_as_sent() -> None:
    a, b, c = event("a", b'{"n":1}'), event("b", b'{"n":2}'), event("c", b'{"n":3}')
    bad = flip(b, len(b) - 6)  # a payload byte: only the message CRC catches it
    with pytest.raises(ChecksumMismatch):
        botocore_messages(a + bad)
    frames, p = parse([a + bad + c])
    assert [f.raw for f in frames] == [a, bad, c]
    assert [f.type for f in frames] == ["a", "b", "c"]
    assert frames[1].data == '{"n":3}'  # 2 ^ 1: what was sent
    assert len(p.problems) == 1 and "message checksum" in p.problems[0]


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 11), st.lists(st.integers(0, 1000), max_size=10))
def test_a_corrupt_prelude_leaves_the_rest_unframed_and_exact(at: int, cuts: list[int]) -> None:
    a, b, c = event("a", b'{"n":1}'), event("b", b'{"n":2}'), event("c", b'{"n":3}')
    body = a + flip(b, at) + c
    chunks = chunked(body, cuts)
    frames, p = parse(chunks)
    assert b"".join(f.raw for f in frames) == body
    assert frames[0] == Frame(a, "a", '{"n":1}')
    assert all(f.type is None and f.data is None for f in frames[1:])
    assert len(p.problems) == 1 and "rest of the stream is kept unframed" in p.problems[0]
    with pytest.raises(ChecksumMismatch):
        botocore_messages(body)


def prelude(total: int, headers: int) -> bytes:
    head = struct.pack(">II", total, headers)
    return head + struct.pack(">I", zlib.crc32(head))  # a matching CRC: only the lengths lie


@pytest.mark.parametrize(
    ("total", "headers", "why"),
    [
        (12, 0, "claims 12 bytes"),  # shorter than a prelude and a message CRC
        (40, 30, "claims 40 bytes with 30"),  # headers longer than the frame
        (16 + (128 << 10) + 1, (128 << 10) + 1, "past the format's limits"),  # headers
        (16 + (24 << 20) + 1, 0, "past the format's limits"),  # payload
    ],
)
def test_an_impossible_length_leaves_the_rest_unframed(total: int, headers: int, why: str) -> None:
    a = event("a", b"{}")
    body = a + prelude(total, headers) + b"whatever follows" + event("b", b"{}")
    frames, p = parse([body[:30], body[30:]])
    assert frames[0] == Frame(a, "a", "{}")
    assert b"".join(f.raw for f in frames) == body
    assert all(f.type is None and f.data is None for f in frames[1:])
    assert len(p.problems) == 1 and why in p.problems[0]
    assert p.pending == 0  # nothing waits for bytes the frame claims


def test_botocore_refuses_the_same_oversized_payload() -> None:
    with pytest.raises(InvalidPayloadLength):
        botocore_messages(prelude(16 + (24 << 20) + 1, 0))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 5000), max_size=12))
def test_a_frame_over_max_frame_is_skipped_and_the_next_one_parses(cuts: list[int]) -> None:
    a, big, b = event("a", b"{}"), event("big", b"x" * 3000), event("b", b"{}")
    body = a + big + b + big + big
    frames, p = parse(chunked(body, cuts), max_frame=1000)
    # Each frame passed over stands in its place as a frame with no bytes.
    passed = Frame(b"", None, None)
    assert frames == [Frame(a, "a", "{}"), passed, Frame(b, "b", "{}"), passed, passed]
    assert p.skipped == 3 and p.problems == []


def test_bad_headers_keep_the_frame_untyped_with_a_problem() -> None:
    good = event("a", b"{}")
    block = b"\x03abc\x0a"  # value type 10 does not exist
    unknown_type = _reframe(block, b"{}")
    cut_short = _reframe(b"\x03abc\x07\x00\x09ab", b"{}")  # a string claiming 9 bytes, has 2
    frames, p = parse([good + unknown_type + cut_short + good])
    assert [(f.type, f.data) for f in frames] == [
        ("a", "{}"),
        (None, None),
        (None, None),
        ("a", "{}"),
    ]
    assert [f.raw for f in frames] == [good, unknown_type, cut_short, good]
    assert len(p.problems) == 2 and all("headers do not parse" in x for x in p.problems)


def _reframe(block: bytes, payload: bytes) -> bytes:
    head = struct.pack(">II", 16 + len(block) + len(payload), len(block))
    body = head + struct.pack(">I", zlib.crc32(head)) + block + payload
    return body + struct.pack(">I", zlib.crc32(body))


@pytest.mark.parametrize("keep", [1, 11, 12, 20])
def test_a_stream_that_ends_inside_a_frame_hands_its_bytes_back(keep: int) -> None:
    a, b = event("a", b"{}"), event("b", b'{"long": "enough"}')
    frames, p = parse([a + b[:keep]])
    assert frames == [Frame(a, "a", "{}"), Frame(b[:keep], None, None)]
    assert p.problems == [f"the stream ended {keep} bytes into a frame"]


def test_feed_after_close_is_refused() -> None:
    p = EventStreamParser()
    p.close()
    with pytest.raises(ValueError, match="after close"):
        p.feed(b"x")


# Streams as they can come: real frames, some damaged (any byte flipped), cut short.
damaged = st.tuples(
    st.lists(st.sampled_from(REAL), min_size=1, max_size=2),
    st.lists(st.integers(0, 1 << 20), max_size=3),
    st.integers(0, 1 << 20) | st.none(),
    st.lists(st.integers(0, 1 << 20), max_size=30),
)


@settings(max_examples=120, deadline=None)
@given(damaged)
def test_frame_counter_counts_the_frames_the_parser_makes(
    case: tuple[list[Path], list[int], int | None, list[int]],
) -> None:
    paths, flips, end, cuts = case
    body = b"".join(p.read_bytes() for p in paths)
    for at in flips:
        body = flip(body, at % len(body))
    if end is not None:
        body = body[: end % (len(body) + 1)]
    chunks = chunked(body, cuts)
    frames, _ = parse(chunks)
    counter = FrameCounter()
    assert sum(counter.feed(c) for c in chunks) + counter.close() == len(frames)
    assert b"".join(f.raw for f in frames) == body
    # Up to a break the frames do not depend on the chunking (past one, the chunks are rows).
    typed = [f for f in frames if f.type is not None]
    assert typed == [f for f in parse([body])[0] if f.type is not None]
