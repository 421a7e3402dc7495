"""What the replay servers' connection handlers call: the shapes both HTTP/1.1
(:mod:`ssetape.replay.http_server`) and HTTP/2 (:mod:`ssetape.replay.h2_server`) serve with."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable
from typing import Protocol

__all__ = ["Responder", "TlsFor"]

# (writer, request line split in words, lower-cased header names -> values, body, when the
# whole request had arrived: a `time.monotonic()` value) -> whether the connection may serve
# another request. The writer may be an HTTP/2 stream's.
Responder = Callable[
    [asyncio.StreamWriter, list[bytes], dict[bytes, bytes], bytes, float], Awaitable[bool]
]


class TlsFor(Protocol):
    """The TLS server context for a tunnel to a host (forward-mode HTTPS)."""

    def context(self, host: str) -> ssl.SSLContext:
        """Made on first use (a certificate to sign: not for the event loop)."""

    def cached(self, host: str) -> ssl.SSLContext | None:
        """The context if it is already made (cheap: fine on the event loop)."""
