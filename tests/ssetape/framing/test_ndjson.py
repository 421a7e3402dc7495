"""NdjsonParser: newline-delimited JSON (Ollama's native API), one frame per line, byte-exact."""

from __future__ import annotations

import itertools
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ssetape.framing.eventstream import Frame
from ssetape.framing.ndjson import NdjsonParser

REAL = sorted(Path("tests/data/real_streams").glob("*.ndjson"))


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in itertools.pairwise([0, *points, len(data)])]


def parse(chunks: list[bytes]) -> list[Frame]:
    p = NdjsonParser()
    out: list[Frame] = []
    for c in chunks:
        out += p.feed(c)
    out += p.close()
    assert p.problems == [] and p.skipped == 0 and p.pending == 0
    return out


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.stem)
def test_real_captures_give_one_frame_per_json_line(path: Path) -> None:
    body = path.read_bytes()
    frames = parse([body])
    lines = body.splitlines(keepends=True)
    assert [f.raw for f in frames] == lines
    assert [orjson.loads(f.data or "") for f in frames] == [orjson.loads(x) for x in lines]
    assert {(f.type, f.id) for f in frames} == {(None, None)}
    assert orjson.loads(frames[-1].data or "")["done"] is True


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(REAL), st.lists(st.integers(0, 1 << 20), max_size=40))
def test_real_captures_parse_the_same_however_chunked(path: Path, cuts: list[int]) -> None:
    body = path.read_bytes()
    assert parse(chunked(body, cuts)) == parse([body])


def test_crlf_lines_lose_their_line_end_in_data_not_in_raw() -> None:
    frames = parse([b'{"a":1}\r\n{"b":2}\r\n'])
    assert [(f.raw, f.data) for f in frames] == [
        (b'{"a":1}\r\n', '{"a":1}'),
        (b'{"b":2}\r\n', '{"b":2}'),
    ]


@pytest.mark.parametrize("size", [1, 2, 3, 100])
def test_a_last_line_without_its_newline_is_still_a_line(size: int) -> None:
    body = b'{"a":1}\n{"done":true}'
    frames = parse([body[i : i + size] for i in range(0, len(body), size)])
    assert [(f.raw, f.data) for f in frames] == [
        (b'{"a":1}\n', '{"a":1}'),
        (b'{"done":true}', '{"done":true}'),
    ]


def test_blank_lines_are_kept_with_no_data() -> None:
    frames = parse([b'{"a":1}\n\n \r\n{"b":2}\n\r\n'])
    assert [(f.raw, f.data) for f in frames] == [
        (b'{"a":1}\n', '{"a":1}'),
        (b"\n", None),
        (b" \r\n", None),
        (b'{"b":2}\n', '{"b":2}'),
        (b"\r\n", None),
    ]


def test_utf8_split_across_chunks_decodes_whole() -> None:
    text = '{"content":"café ☕ 🎉 日本"}'
    body = (text + "\n").encode()
    for cut in range(len(body) + 1):
        assert parse([body[:cut], body[cut:]]) == [Frame(body, None, text)]
    assert parse([bytes([b]) for b in body]) == [Frame(body, None, text)]


def test_invalid_utf8_is_replaced_not_raised() -> None:
    assert parse([b'{"a":"\xff\xc3"}\n'])[0].data == '{"a":"\ufffd\ufffd"}'


def test_pending_and_tail_show_the_unfinished_line() -> None:
    # Capture bounds a line's size through pending, and resumes after it using tail.
    p = NdjsonParser()
    assert p.feed(b'{"a":1}\n{"b":') == [Frame(b'{"a":1}\n', None, '{"a":1}')]
    assert (p.pending, p.tail(3), p.tail(0)) == (5, b'b":', b"")
    assert p.feed(b"2}") == [] and p.pending == 7
    assert p.feed(b"\n") == [Frame(b'{"b":2}\n', None, '{"b":2}')] and p.pending == 0


def test_feed_after_close_is_refused() -> None:
    p = NdjsonParser()
    p.close()
    with pytest.raises(ValueError, match="after close"):
        p.feed(b"{}\n")


PIECES = [b"\n", b"\r", b"\r\n", b" ", b"{", b"}", b'"x"', b"\xc3", b"\xa9", "☕".encode(), b"\xff"]
ndjson_ish = st.lists(st.sampled_from(PIECES) | st.binary(max_size=8), max_size=50).map(b"".join)


@settings(max_examples=200, deadline=None)
@given(ndjson_ish, st.lists(st.integers(0, 1000), max_size=20))
def test_any_bytes_any_chunking_are_byte_exact_and_the_same(body: bytes, cuts: list[int]) -> None:
    frames = parse(chunked(body, cuts))
    assert frames == parse([body])
    assert b"".join(f.raw for f in frames) == body
    for f in frames[:-1]:
        assert f.raw.endswith(b"\n") and f.raw.count(b"\n") == 1
    assert len(frames) == body.count(b"\n") + (not body.endswith(b"\n") and bool(body))
