"""Content decoders (``Content-Encoding``), one registry for capture, HAR export and views.

Every decoder is bounded: :meth:`Decoder.feed` yields the output in pieces of at most
``piece`` bytes, so a small compressed body that inflates to gigabytes (a decompression bomb)
never sits in memory whole, and the caller stops reading where its own bound is. gzip and
deflate come with Python; br needs ``brotli``; zstd needs ``compression.zstd`` (Python 3.14)
or its backport, ``backports.zstd`` (a dependency of ssetape below 3.14).
"""

from __future__ import annotations

import importlib
import zlib
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["DECODERS", "PIECE", "Decoder", "DecodingTooLarge", "decode", "decoder"]

PIECE = 1 << 20  # bytes of output at a time


class DecodingTooLarge(ValueError):
    """A body that decodes to more than the caller allows."""


class Decoder:
    """Incremental and bounded: ``feed`` each wire chunk, read its output piece by piece."""

    def feed(self, data: bytes, piece: int = PIECE) -> Iterator[bytes]:
        raise NotImplementedError


class _Zlib(Decoder):
    def __init__(self, wbits: int) -> None:
        self._d: Any = zlib.decompressobj(wbits)

    def feed(self, data: bytes, piece: int = PIECE) -> Iterator[bytes]:
        d = self._d
        while data:
            out: bytes = d.decompress(data, piece)
            data = d.unconsumed_tail
            if out:
                yield out
            elif d.eof:
                return  # trailing bytes after the end of the stream are not content


class _Deflate(Decoder):
    """HTTP deflate is zlib-wrapped, but some servers send it raw: the first bytes decide."""

    def __init__(self) -> None:
        self._inner: _Zlib | None = None
        self._head = b""  # the first byte, until the second one says which kind it is

    def feed(self, data: bytes, piece: int = PIECE) -> Iterator[bytes]:
        if self._inner is None:
            data = self._head + data
            if len(data) < 2:
                self._head = data
                return
            # A zlib header's first byte is 0x?8 (method 8) and the pair is a multiple of 31.
            wrapped = data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0
            self._inner = _Zlib(zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)
        yield from self._inner.feed(data, piece)


class _Brotli(Decoder):
    # Without brotli's own output limit (before Brotli 1.2, which mitmproxy 11 pins), input
    # goes in 8-byte pieces: one call then yields at most 8 MiB (a bomb of 64 MiB of zeros,
    # fed 1 to 8 bytes at a time: 8 MiB per call at most; 16 bytes: 16 MiB; 64: 40 MiB).
    # A call per 8 bytes is slow, but only br streams on Python 3.11 pay it.
    _SLOW_PIECE = 8

    def __init__(self) -> None:
        self._brotli: Any = importlib.import_module("brotli")
        self._d: Any = self._brotli.Decompressor()
        self._limited = hasattr(self._d, "can_accept_more_data")

    def feed(self, data: bytes, piece: int = PIECE) -> Iterator[bytes]:
        d = self._d
        if self._limited:
            out: bytes = d.process(data, output_buffer_limit=piece)
            while True:
                if out:
                    yield out
                if d.can_accept_more_data() or d.is_finished():
                    return
                out = d.process(b"", output_buffer_limit=piece)
        for start in range(0, len(data), self._SLOW_PIECE):
            out = d.process(data[start : start + self._SLOW_PIECE])
            if out:
                yield out


class _Zstd(Decoder):
    def __init__(self) -> None:
        self._module = _zstd_module()
        self._d: Any = self._module.ZstdDecompressor()

    def feed(self, data: bytes, piece: int = PIECE) -> Iterator[bytes]:
        while True:
            d = self._d
            out: bytes = d.decompress(data, max_length=piece)
            data = b""
            if out:
                yield out
            if d.eof:  # a stream may hold several frames: the next one starts afresh
                data = d.unused_data
                self._d = self._module.ZstdDecompressor()
                if not data:
                    return
            elif d.needs_input:
                return


def _zstd_module() -> Any:
    for name in ("compression.zstd", "backports.zstd"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError("no zstd module: pip install backports.zstd")


DECODERS: dict[str, Callable[[], Decoder]] = {
    "gzip": lambda: _Zlib(16 + zlib.MAX_WBITS),
    "x-gzip": lambda: _Zlib(16 + zlib.MAX_WBITS),
    "deflate": _Deflate,
    "br": _Brotli,
    "zstd": _Zstd,
}


def decoder(encoding: str) -> Decoder | None:
    """A decoder for a Content-Encoding; None for identity; ValueError for one this ssetape
    cannot decode."""
    enc = encoding.strip().lower()
    if enc in ("", "identity"):
        return None
    make = DECODERS.get(enc)
    if make is None:
        raise ValueError(f"unsupported content-encoding {encoding!r}")
    try:
        return make()
    except ImportError as e:
        raise ValueError(f"content-encoding {enc}: {e}") from None


def decode(data: bytes, encoding: str, limit: int) -> bytes:
    """A whole body decoded: DecodingTooLarge past ``limit`` bytes, ValueError if it does
    not decode (a body cut mid-stream)."""
    d = decoder(encoding)
    if d is None:
        return data
    out = bytearray()
    try:
        for piece in d.feed(data):
            out += piece
            if len(out) > limit:
                raise DecodingTooLarge(f"{encoding} body decodes to more than {limit} bytes")
    except DecodingTooLarge:
        raise
    except Exception as e:
        raise ValueError(f"cannot decode {encoding}: {type(e).__name__}: {e}") from None
    return bytes(out)
