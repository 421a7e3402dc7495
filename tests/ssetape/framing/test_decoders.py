"""Content decoders: every registered encoding decodes a stream chunk by chunk and whole."""

from __future__ import annotations

import gzip
import zlib

import brotli
import pytest

from ssetape.framing.decoders import DECODERS, DecodingTooLarge, decode, decoder

TEXT = b'data: {"choices":[{"delta":{"content":"caf\xc3\xa9"}}]}\n\n' * 200


def compress(encoding: str, data: bytes) -> bytes:
    if encoding in ("gzip", "x-gzip"):
        return gzip.compress(data)
    if encoding == "deflate":
        return zlib.compress(data)
    if encoding == "br":
        import brotli

        return brotli.compress(data)  # type: ignore[no-any-return]
    if encoding == "zstd":
        from backports import zstd  # ssetape's dependency below Python 3.14

        return zstd.compress(data)
    raise AssertionError(encoding)


@pytest.mark.parametrize("encoding", sorted(DECODERS))
def test_streams_decode_chunk_by_chunk(encoding: str) -> None:
    wire = compress(encoding, TEXT)
    d = decoder(encoding.upper())  # names are case-insensitive
    assert d is not None
    out = b"".join(b"".join(d.feed(wire[i : i + 7])) for i in range(0, len(wire), 7))
    assert out == TEXT
    one_by_one = decoder(encoding)  # a header split across chunks too
    assert one_by_one is not None
    assert b"".join(b"".join(one_by_one.feed(wire[i : i + 1])) for i in range(len(wire))) == TEXT
    assert decode(wire, encoding, len(TEXT)) == TEXT


def test_raw_deflate_as_some_servers_send_it() -> None:
    c = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    raw = c.compress(TEXT) + c.flush()
    assert decode(raw, "deflate", len(TEXT)) == TEXT


def test_identity_unknown_and_broken() -> None:
    assert decoder("") is None and decoder(" identity ") is None
    assert decode(b"as is", "identity", 0) == b"as is"
    with pytest.raises(ValueError, match="unsupported content-encoding 'compress'"):
        decoder("compress")
    with pytest.raises(ValueError, match="cannot decode gzip"):
        decode(b"not gzip at all", "gzip", 1000)


BOMB = 1 << 30  # a gigabyte of zeros


def bomb(encoding: str) -> bytes:
    """A small body that inflates to BOMB bytes, made without holding them."""
    if encoding in ("gzip", "x-gzip", "deflate"):
        c = zlib.compressobj(9, zlib.DEFLATED, 31 if "gzip" in encoding else 15)
        block = bytes(1 << 20)
        return b"".join(c.compress(block) for _ in range(BOMB >> 20)) + c.flush()
    if encoding == "br":
        import brotli

        return brotli.compress(bytes(1 << 26), quality=5)  # 64 MiB of zeros in a few KB
    from backports import zstd

    comp = zstd.ZstdCompressor()
    block = bytes(1 << 20)
    return b"".join(comp.compress(block) for _ in range(BOMB >> 20)) + comp.flush()


@pytest.mark.parametrize("encoding", sorted(DECODERS))
def test_a_bomb_comes_out_in_bounded_pieces(encoding: str) -> None:
    wire = bomb(encoding)
    d = decoder(encoding)
    assert d is not None
    total, largest = 0, 0
    for piece in d.feed(wire, piece=1 << 16):
        total += len(piece)
        largest = max(largest, len(piece))
        if total > 1 << 24:  # the caller's own bound: it stops reading here
            break
    # Never one huge allocation (brotli before 1.2 has no output limit: one meta-block).
    slow_brotli = encoding == "br" and not hasattr(brotli.Decompressor(), "can_accept_more_data")
    assert total > 1 << 24 and largest <= (8 << 20 if slow_brotli else 1 << 20)
    with pytest.raises(DecodingTooLarge):
        decode(wire, encoding, 1 << 20)
