"""The proxy counts events in relayed bytes as the store will: one per SSE event (and per extra
blank line), NDJSON line or AWS event-stream frame however the chunks split them, one per chunk
of other streams, none for an encoded stream."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ssetape.framing.framings import Framing
from ssetape.framing.sse import SseParser
from ssetape.recording.capture import Capture
from ssetape.recording.event_count import EventCount
from tests.ssetape.recording.sink import Sink

STREAM = b': comment\n\ndata: {"a": "\xc3\xa9"}\n\nevent: x\ndata: 2\n\ndata: last'


def stored(body: bytes) -> int:
    parser = SseParser()
    return len(parser.feed(body) + parser.close())


@pytest.mark.parametrize("ends", [b"\n", b"\r\n", b"\r"])
@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 1000])
def test_sse_events_count_the_same_however_the_chunks_split_them(ends: bytes, size: int) -> None:
    body = STREAM.replace(b"\n", ends)
    count = EventCount()
    count.stream("u", framing=Framing.SSE, encoded=False)
    n = sum(count.chunk("u", body[i : i + size]) for i in range(0, len(body), size))
    assert n + count.end("u") == stored(body) == 4


def test_other_streams_count_chunks_and_encoded_ones_nothing() -> None:
    count = EventCount()
    count.stream("raw", framing=Framing.CHUNKS, encoded=False)
    count.stream("gz", framing=Framing.SSE, encoded=True)
    assert [count.chunk("raw", c) for c in (b'{"a": 1}\n\n', b"", b"[")] == [1, 0, 1]
    assert count.chunk("gz", b"\x1f\x8b\n\n\n\n") == 0
    assert count.end("raw") == count.end("gz") == 0


# Parity with what the store keeps: the rows Capture makes of the same chunks, for every framing,
# over real bodies cut anywhere (and AWS event streams with damaged bytes).


_REAL = Path("tests/data/real_streams")
_BODIES = {
    Framing.SSE: sorted(p for p in _REAL.glob("*.sse") if not p.stem.endswith("_gzip")),
    Framing.NDJSON: sorted(_REAL.glob("*.ndjson")),
    Framing.EVENTSTREAM: sorted(_REAL.glob("*.eventstream")),
    Framing.CHUNKS: sorted(_REAL.glob("*.ndjson")) + sorted(_REAL.glob("*.eventstream"))[:2],
}


def _chunked(data: bytes, cuts: list[int], empties: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    chunks = [data[a:b] for a, b in itertools.pairwise([0, *points, len(data)])]
    for at in empties:  # the proxy may hand over empty chunks too
        chunks.insert(at % (len(chunks) + 1), b"")
    return chunks


def _rows(framing: Framing, chunks: list[bytes]) -> int:
    sink = Sink()
    cap = Capture("u", sink, framing=framing)
    for i, c in enumerate(chunks):
        cap.feed(c, i)
    cap.close(len(chunks))
    assert sink.raw() == b"".join(chunks) and cap.error is None
    return len(sink.events)


def _counted(framing: Framing, chunks: list[bytes]) -> int:
    count = EventCount()
    count.stream("u", framing=framing, encoded=False)
    return sum(count.chunk("u", c) for c in chunks) + count.end("u")


_case = st.sampled_from(list(_BODIES)).flatmap(
    lambda f: st.tuples(st.just(f), st.sampled_from(_BODIES[f]))
)


@settings(max_examples=150, deadline=None)
@given(
    _case,
    st.lists(st.integers(0, 1 << 20), max_size=40),
    st.lists(st.integers(0, 100), max_size=2),
    st.lists(st.integers(0, 1 << 20), max_size=2),
    st.integers(0, 1 << 20) | st.none(),
)
def test_counts_match_the_rows_capture_stores_for_every_framing(
    case: tuple[Framing, Path],
    cuts: list[int],
    empties: list[int],
    flips: list[int],
    end: int | None,
) -> None:
    framing, path = case
    body = path.read_bytes()
    if framing is Framing.EVENTSTREAM:  # damage: a bad checksum, a broken prelude, a cut
        for at in flips:
            at %= len(body)
            body = body[:at] + bytes([body[at] ^ 0x40]) + body[at + 1 :]
    if end is not None:
        body = body[: end % (len(body) + 1)]
    chunks = _chunked(body, cuts, empties)
    assert _counted(framing, chunks) == _rows(framing, chunks)


@pytest.mark.parametrize("size", [1, 2, 3, 5, 11, 12, 13, 1000])
def test_ndjson_and_eventstream_count_the_same_however_split(size: int) -> None:
    for framing in (Framing.NDJSON, Framing.EVENTSTREAM):
        for path in _BODIES[framing]:
            body = path.read_bytes()
            chunks = [body[i : i + size] for i in range(0, len(body), size)]
            assert _counted(framing, chunks) == _rows(framing, chunks) == _rows(framing, [body])


@pytest.mark.parametrize(
    "body",
    [b"\ndata: 1\n\n", b"data: 1\n\n\n\ndata: 2\n\n", b"data: 1\r\n\r\n\r\ndata: 2\r\n\r\n"],
)
def test_sse_extra_blank_lines_count_as_the_rows_they_become(body: bytes) -> None:
    assert _counted(Framing.SSE, [body]) == _rows(Framing.SSE, [body])


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(st.sampled_from(["data: x", "", ": keep-alive", "event: e", "data: [DONE]"])),
    newline=st.sampled_from(["\n", "\r\n"]),
    cuts=st.lists(st.integers(0, 400), max_size=8),
)
def test_any_run_of_blank_lines_counts_as_the_rows_it_becomes(
    lines: list[str], newline: str, cuts: list[int]
) -> None:
    """Extra blank lines (keep-alives some servers send as bare newlines) are rows of their
    own: the proxy counts each, however the chunks cut the run."""
    body = "".join(line + newline for line in lines).encode()
    points = sorted({c % (len(body) + 1) for c in cuts} | {0, len(body)})
    chunks = [body[a:b] for a, b in itertools.pairwise(points)]
    assert _counted(Framing.SSE, chunks) == _rows(Framing.SSE, chunks)
