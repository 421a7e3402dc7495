"""Fuzz the recording process's stream capture (``Capture``): malformed SSE, random bytes,
random chunking, random and broken content-encodings, a sink that fails.

Whatever comes in: no exception escapes, and what is captured is consistent with what went
by (a prefix of it when capture gave up). That the client gets its bytes unchanged is the
proxy's stamp callable's job, tested in tests/addons/test_recorder_crash.py.
"""

from __future__ import annotations

import itertools
import logging
import zlib
from collections.abc import Callable

import brotli
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ssetape.framing.framings import Framing
from ssetape.recording.capture import Capture
from tests.ssetape.recording.sink import Sink

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Pieces that SSE parsers trip over, glued in random order with random bytes between.
PIECES = [
    b"data:", b"data: ", b"event:", b"event: ping", b"id:", b"id: 7", b"retry: 10",
    b"retry: x", b": keep-alive", b":", b"\n", b"\r", b"\r\n", b"\n\n", b"\r\r", b"\xef\xbb\xbf",
    b"{", b"}", b'"', b"[DONE]", b" ", b"\x00", b"\xff", b"\xc3", b"\xe2\x82", b"\xf0\x9f\x8e",
    "café ☕ 🎉".encode(), b"data: {\"a\":1}\n\n", b"data\n", b"event\n\n", b"x" * 300,
]  # fmt: skip
sse_like = st.lists(st.sampled_from(PIECES) | st.binary(max_size=20), max_size=60).map(b"".join)
bodies = sse_like | st.binary(max_size=2000)


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    edges = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


def feed(cap: Capture, chunks: list[bytes]) -> None:
    """The property every test shares: whatever the bytes, nothing raises."""
    for i, chunk in enumerate(chunks):
        cap.feed(chunk, i)
    cap.close(len(chunks))
    cap.feed(b"", len(chunks))  # a late empty chunk is harmless


@pytest.fixture(autouse=True)
def quiet_capture() -> None:
    # Thousands of broken streams: keep their (correct) warnings out of the report.
    logging.getLogger("ssetape.recording.capture").setLevel(logging.ERROR)


@FUZZ
@given(
    body=bodies,
    cuts=st.lists(st.integers(min_value=0), max_size=30),
    framing=st.sampled_from(Framing),
)
def test_any_bytes_any_chunking_pass_unchanged(
    body: bytes, cuts: list[int], framing: Framing
) -> None:
    sink = Sink()
    cap = Capture("u", sink, framing=framing)
    feed(cap, chunked(body, cuts))
    assert cap.error is None  # identity streams never fail, whatever the bytes
    assert sink.raw() == body  # every byte is in exactly one event
    assert [e["seq"] for e in sink.events] == list(range(len(sink.events)))


def _gzip_like(wbits: int) -> Callable[[bytes, list[int]], bytes]:
    def encode(body: bytes, flushes: list[int]) -> bytes:
        co = zlib.compressobj(wbits=wbits)
        out = [co.compress(piece) + co.flush(zlib.Z_SYNC_FLUSH) for piece in chunked(body, flushes)]
        return b"".join([*out, co.flush()])

    return encode


def _brotli(body: bytes, flushes: list[int]) -> bytes:
    co = brotli.Compressor()
    out = [co.process(piece) + co.flush() for piece in chunked(body, flushes)]
    return b"".join([*out, co.finish()])


def _zstd(body: bytes, flushes: list[int]) -> bytes:
    """zstd with a block flush per piece, by whichever binding mitmproxy brought."""
    try:
        from backports import zstd  # mitmproxy 12; `compression.zstd` from Python 3.14

        co = zstd.ZstdCompressor()
        out = [co.compress(piece, co.FLUSH_BLOCK) for piece in chunked(body, flushes)]
        return b"".join([*out, co.flush()])
    except ImportError:
        import zstandard  # mitmproxy 11

        zo = zstandard.ZstdCompressor().compressobj()
        out = [zo.compress(piece) + zo.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
               for piece in chunked(body, flushes)]  # fmt: skip
        return b"".join([*out, zo.flush()])


ENCODERS: dict[str, Callable[[bytes, list[int]], bytes]] = {
    "gzip": _gzip_like(16 + zlib.MAX_WBITS),
    "x-gzip": _gzip_like(16 + zlib.MAX_WBITS),
    "deflate": _gzip_like(zlib.MAX_WBITS),
    "br": _brotli,
    "zstd": _zstd,
}
# Header values a server may send that the capture cannot or need not decode.
ODD_ENCODINGS = ["", "identity", " GZIP ", "compress", "gzip, br", "br;q=1", "zstd\x00", "ü"]


@FUZZ
@given(
    body=bodies,
    encoding=st.sampled_from(sorted(ENCODERS)),
    flushes=st.lists(st.integers(min_value=0), max_size=8),
    cuts=st.lists(st.integers(min_value=0), max_size=30),
    damage=st.none() | st.tuples(st.integers(min_value=0), st.integers(1, 255)),
    truncate=st.none() | st.integers(min_value=0),
    label=st.none() | st.sampled_from(ODD_ENCODINGS),
)
def test_encoded_streams_broken_or_not_pass_unchanged(
    body: bytes,
    encoding: str,
    flushes: list[int],
    cuts: list[int],
    damage: tuple[int, int] | None,
    truncate: int | None,
    label: str | None,
) -> None:
    wire = bytearray(ENCODERS[encoding](body, flushes))
    intact = damage is None and truncate is None and label is None
    if damage is not None:  # flip bits of one byte
        wire[damage[0] % len(wire)] ^= damage[1]
    if truncate is not None:
        del wire[truncate % len(wire) :]
    sink = Sink()
    cap = Capture("u", sink, framing=Framing.SSE, encoding=encoding if label is None else label)
    chunks = chunked(bytes(wire), cuts)
    feed(cap, chunks)
    # Wire chunks are kept as they came, up to where capture gave up (if it did).
    kept = b"".join(c["data"] for c in sink.chunks)  # type: ignore[misc]
    assert bytes(wire).startswith(kept)
    if intact:
        assert cap.error is None
        assert kept == bytes(wire)
        assert sink.raw() == body
    elif damage is None and label is None:
        # A cut stream decodes to a prefix of the body; the parser keeps every byte of it.
        assert cap.error is not None or body.startswith(sink.raw())


@FUZZ
@given(
    body=sse_like,
    cuts=st.lists(st.integers(min_value=0), max_size=30),
    fail_at=st.integers(min_value=1, max_value=40),
    encoding=st.sampled_from(["", "gzip"]),
)
def test_a_failing_sink_never_touches_the_bytes(
    body: bytes, cuts: list[int], fail_at: int, encoding: str
) -> None:
    wire = ENCODERS["gzip"](body, []) if encoding else body
    sink = Sink(fail_at=fail_at)
    cap = Capture("u", sink, framing=Framing.SSE, encoding=encoding)
    feed(cap, chunked(wire, cuts))
    if sink.calls >= fail_at:
        assert cap.error is not None and "sink exploded" in cap.error
        # No event is captured after the failure: no half-parsed state is reused. Wire
        # chunks go on (replay sends those).
        assert "events" not in sink.kinds[fail_at:]


@FUZZ
@given(
    body=sse_like,
    cuts=st.lists(st.integers(min_value=0), max_size=30),
    dropped=st.sets(st.integers(min_value=0, max_value=30), max_size=10),
)
def test_after_dropped_chunks_every_event_captured_was_sent(
    body: bytes, cuts: list[int], dropped: set[int]
) -> None:
    """Whatever the proxy had to drop, no event is made up and none reordered."""
    sent = Sink()
    full = Capture("u", sent, framing=Framing.SSE)
    sink = Sink()
    cap = Capture("u", sink, framing=Framing.SSE)
    chunks = chunked(body, cuts)
    for i, chunk in enumerate(chunks):
        full.feed(chunk, i)
        if i in dropped and chunk:
            cap.gap(len(chunk), chunk[-4:])
        else:
            cap.feed(chunk, i)
    full.close(len(chunks))
    cap.close(len(chunks))
    assert cap.error is None
    want = [e["data"] for e in sent.events if e["data"] is not None]
    got = [e["data"] for e in sink.events if e["data"] is not None]
    it = iter(want)
    assert all(any(g == w for w in it) for g in got), (got, want)  # a subsequence
    if not dropped & set(range(len(chunks))):
        assert got == want
