"""Content decoders: every registered encoding decodes a stream chunk by chunk and whole."""

from __future__ import annotations

import gzip
import importlib
import importlib.util
import zlib

import pytest

from ssetape.decoders import DECODERS, decode, decoder

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
        for name in ("compression.zstd", "backports.zstd", "zstandard"):
            if importlib.util.find_spec(name.split(".")[0]) and importlib.util.find_spec(name):
                module = importlib.import_module(name)
                return module.compress(data)  # type: ignore[no-any-return]
        pytest.skip("no zstd module installed to make a zstd body with")
    raise AssertionError(encoding)


@pytest.mark.parametrize("encoding", sorted(DECODERS))
def test_streams_decode_chunk_by_chunk(encoding: str) -> None:
    wire = compress(encoding, TEXT)
    d = decoder(encoding.upper())  # names are case-insensitive
    assert d is not None
    out = b"".join(d.decompress(wire[i : i + 7]) for i in range(0, len(wire), 7))
    assert out == TEXT
    one_by_one = decoder(encoding)  # a header split across chunks too
    assert one_by_one is not None
    assert b"".join(one_by_one.decompress(wire[i : i + 1]) for i in range(len(wire))) == TEXT
    assert decode(wire, encoding) == TEXT


def test_raw_deflate_as_some_servers_send_it() -> None:
    c = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    raw = c.compress(TEXT) + c.flush()
    assert decode(raw, "deflate") == TEXT


def test_identity_unknown_and_broken() -> None:
    assert decoder("") is None and decoder(" identity ") is None
    assert decode(b"as is", "identity") == b"as is"
    with pytest.raises(ValueError, match="unsupported content-encoding 'compress'"):
        decoder("compress")
    with pytest.raises(ValueError, match="cannot decode gzip"):
        decode(b"not gzip at all", "gzip")
