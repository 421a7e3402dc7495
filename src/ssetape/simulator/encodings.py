"""Content encodings the simulated API answers in when the model name asks for one and the
client accepts it (``sim-gzip``, ``sim-br``, ``sim-zstd``), as real APIs compress when asked.

A stream is flushed after every write, so each chunk decodes as soon as it arrives, the way a
server that streams compressed SSE must do. The registry is where an encoding is added.
"""

from __future__ import annotations

import importlib
import sys
import zlib
from collections.abc import Callable, Iterable
from typing import Any, Protocol

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

__all__ = ["ENCODERS", "StreamEncoder", "chosen", "encode_whole"]


class StreamEncoder(Protocol):
    def chunk(self, data: bytes) -> bytes:
        """``data`` compressed and flushed: decodable on its own after what came before."""

    def end(self) -> bytes:
        """What finishes the body."""


class _Gzip:
    def __init__(self) -> None:
        self._co = zlib.compressobj(9, zlib.DEFLATED, 31)

    def chunk(self, data: bytes) -> bytes:
        return self._co.compress(data) + self._co.flush(zlib.Z_SYNC_FLUSH)

    def end(self) -> bytes:
        return self._co.flush()


class _Brotli:
    def __init__(self) -> None:
        # Imported when a br stream is asked for: brotli comes with mitmproxy, which a test
        # environment replaying in process may not have (see ssetape.testing.requirements).
        self._co: Any = importlib.import_module("brotli").Compressor()

    def chunk(self, data: bytes) -> bytes:
        return bytes(self._co.process(data) + self._co.flush())

    def end(self) -> bytes:
        return bytes(self._co.finish())


class _Zstd:
    def __init__(self) -> None:
        self._co = zstd.ZstdCompressor()

    def chunk(self, data: bytes) -> bytes:
        return self._co.compress(data, mode=zstd.ZstdCompressor.FLUSH_BLOCK)

    def end(self) -> bytes:
        return self._co.flush(mode=zstd.ZstdCompressor.FLUSH_FRAME)


ENCODERS: dict[str, Callable[[], StreamEncoder]] = {"gzip": _Gzip, "br": _Brotli, "zstd": _Zstd}


def chosen(keywords: Iterable[str], accept_encoding: str) -> str:
    """The encoding a scenario asks for and the client accepts, or "" (identity)."""
    accepted = set()
    for part in accept_encoding.split(","):
        name, _, params = part.partition(";")
        key, _, value = params.strip().partition("=")
        try:
            q = float(value) if key.strip() == "q" else 1.0
        except ValueError:
            q = 1.0
        if q > 0:
            accepted.add(name.strip().lower())
    return next((k for k in sorted(keywords) if k in ENCODERS and k in accepted), "")


def encode_whole(encoding: str, data: bytes) -> bytes:
    encoder = ENCODERS[encoding]()
    return encoder.chunk(data) + encoder.end()
