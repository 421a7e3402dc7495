"""What the replay servers' connection handlers call: the shapes both HTTP/1.1
(:mod:`ssetape.replay.http_server`) and HTTP/2 (:mod:`ssetape.replay.h2_server`) serve with."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable

__all__ = ["Responder", "TlsFor"]

# (writer, request line split in words, lower-cased header names -> values, body) -> whether
# the connection may serve another request. The writer may be an HTTP/2 stream's.
Responder = Callable[
    [asyncio.StreamWriter, list[bytes], dict[bytes, bytes], bytes], Awaitable[bool]
]

# A host name -> the TLS server context for a tunnel to it (forward-mode HTTPS).
TlsFor = Callable[[str], ssl.SSLContext]
