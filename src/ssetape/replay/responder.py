"""What the replay servers' connection handlers call: the shapes both HTTP/1.1
(:mod:`ssetape.replay.http_server`) and HTTP/2 (:mod:`ssetape.replay.h2_server`) serve with.

A responder answers in typed parts (:mod:`ssetape.replay.response_parts`) through a
:class:`ResponseWriter`, which frames them for its protocol. Framing and writing are two
steps, so that a timed replay frames each write ahead and only writes at its deadline.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar

from ssetape.replay.response_parts import Fields, Part, error_parts

__all__ = ["Responder", "ResponseWriter", "TlsFor", "error_response"]

F = TypeVar("F")  # parts as a writer's protocol frames them (HTTP/1.1: bytes)


class ResponseWriter(Protocol[F]):
    """One response's way out, in its connection's protocol (HTTP/1.1: the connection;
    HTTP/2: a stream of it)."""

    def frame(self, parts: Sequence[Part]) -> F:
        """``parts`` framed as one write (frame a response's parts in order: a head sets how
        its body is framed)."""

    def write(self, framed: F) -> None:
        """Send what :meth:`frame` made, now (as much as flow control lets go)."""

    def send(self, parts: Sequence[Part]) -> None:
        """Frame ``parts`` and write them, as one write."""

    def is_closing(self) -> bool:
        """The client left (or the response went out whole): nothing more goes out."""

    def abort(self) -> None:
        """Cut the response (HTTP/1.1: the connection; HTTP/2: its stream), as a recording
        that ended there."""

    async def drain(self) -> None:
        """Wait while the client reads slower than the writes (ConnectionError: it left)."""


# (writer, request line split in words, lower-cased header names -> values, body, when the
# whole request had arrived: a `time.monotonic()` value) -> whether the connection may serve
# another request.
Responder = Callable[
    [ResponseWriter[Any], list[bytes], dict[bytes, bytes], bytes, float], Awaitable[bool]
]


def error_response(
    out: ResponseWriter[Any],
    status: int,
    body: str | bytes,
    content_type: str = "text/plain",
    extra: Fields = (),
) -> None:
    """Answer with ssetape's own error (``extra``: more header fields, after the others)."""
    data = body.encode() if isinstance(body, str) else body
    out.send(error_parts(status, data, content_type.encode(), extra))


class TlsFor(Protocol):
    """The TLS server context for a tunnel to a host (forward-mode HTTPS)."""

    def context(self, host: str) -> ssl.SSLContext:
        """Made on first use (a certificate to sign: not for the event loop)."""

    def cached(self, host: str) -> ssl.SSLContext | None:
        """The context if it is already made (cheap: fine on the event loop)."""
