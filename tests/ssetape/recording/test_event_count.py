"""The proxy counts events in relayed bytes as the store will: one per SSE event however the
chunks split it, one per chunk of other streams, none for an encoded stream."""

from __future__ import annotations

import pytest

from ssetape.recording.event_count import EventCount
from ssetape.sse import SseParser

STREAM = b': comment\n\ndata: {"a": "\xc3\xa9"}\n\nevent: x\ndata: 2\n\ndata: last'


def stored(body: bytes) -> int:
    parser = SseParser()
    return len(parser.feed(body) + parser.close())


@pytest.mark.parametrize("ends", [b"\n", b"\r\n", b"\r"])
@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 1000])
def test_sse_events_count_the_same_however_the_chunks_split_them(ends: bytes, size: int) -> None:
    body = STREAM.replace(b"\n", ends)
    count = EventCount()
    count.stream("u", sse=True, encoded=False)
    n = sum(count.chunk("u", body[i : i + size]) for i in range(0, len(body), size))
    assert n + count.end("u") == stored(body) == 4


def test_other_streams_count_chunks_and_encoded_ones_nothing() -> None:
    count = EventCount()
    count.stream("ndjson", sse=False, encoded=False)
    count.stream("gz", sse=True, encoded=True)
    assert [count.chunk("ndjson", c) for c in (b'{"a": 1}\n\n', b"", b"[")] == [1, 0, 1]
    assert count.chunk("gz", b"\x1f\x8b\n\n\n\n") == 0
    assert count.end("ndjson") == count.end("gz") == 0
