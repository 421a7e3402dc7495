"""Content decoders (``Content-Encoding``), one registry for capture, HAR export and views.

Each entry makes an incremental decoder: recorded streams are decoded chunk by chunk as they
arrive, whole bodies in one call. gzip and deflate come with Python; br needs ``brotli`` and
zstd whichever zstandard binding is installed (mitmproxy brings one of them on every version).
"""

from __future__ import annotations

import importlib
import zlib
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["DECODERS", "Decoder", "decode", "decoder"]


class Decoder(Protocol):
    def decompress(self, data: bytes) -> bytes: ...


class _Brotli:
    def __init__(self) -> None:
        brotli: Any = importlib.import_module("brotli")
        self._d = brotli.Decompressor()

    def decompress(self, data: bytes) -> bytes:
        out: bytes = self._d.process(data)
        return out


# Where a zstd decompressor may come from, best first: the standard library (3.14),
# its backport (mitmproxy 12), the zstandard package (mitmproxy 11).
_ZSTD_MODULES = ("compression.zstd", "backports.zstd", "zstandard")


def _zstd() -> Decoder:
    for name in _ZSTD_MODULES:
        try:
            module: Any = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(module, "ZstdDecompressor") and hasattr(module, "ZstdError"):
            if name == "zstandard":
                d: Decoder = module.ZstdDecompressor().decompressobj()
            else:
                d = module.ZstdDecompressor()
            return d
    raise ValueError("content-encoding zstd: no zstd module is installed (pip install zstandard)")


class _Deflate:
    """HTTP deflate is zlib-wrapped, but some servers send it raw: the first bytes decide."""

    def __init__(self) -> None:
        self._d: Any = None
        self._head = b""  # the first byte, until the second one says which kind it is

    def decompress(self, data: bytes) -> bytes:
        if self._d is None:
            data = self._head + data
            if len(data) < 2:
                self._head = data
                return b""
            # A zlib header's first byte is 0x?8 (method 8) and the pair is a multiple of 31.
            wrapped = data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0
            self._d = zlib.decompressobj(zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)
        out: bytes = self._d.decompress(data)
        return out


DECODERS: dict[str, Callable[[], Decoder]] = {
    "gzip": lambda: zlib.decompressobj(16 + zlib.MAX_WBITS),
    "x-gzip": lambda: zlib.decompressobj(16 + zlib.MAX_WBITS),
    "deflate": _Deflate,
    "br": _Brotli,
    "zstd": _zstd,
}


def decoder(encoding: str) -> Decoder | None:
    """An incremental decoder for a Content-Encoding; None for identity; ValueError for one
    this ssetape cannot decode."""
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


def decode(data: bytes, encoding: str) -> bytes:
    """A whole body decoded; ValueError if it does not decode (a body cut mid-stream)."""
    d = decoder(encoding)
    if d is None:
        return data
    try:
        return d.decompress(data)
    except Exception as e:
        raise ValueError(f"cannot decode {encoding}: {type(e).__name__}: {e}") from None
