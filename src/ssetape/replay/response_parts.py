"""A replayed response as typed parts: what the player, the fault answers and the error answers
build once, and what each protocol's writer frames itself.

As h11's events, these are messages both sides import: a producer says "status 200, these
headers, this piece of body at 0.12 s, the end", and the HTTP/1.1 writer
(:class:`ssetape.replay.http_server.Http1Writer`) frames that as a status line, header lines
and chunked or sized body, the HTTP/2 writer (:class:`ssetape.replay.h2_server.H2Stream`) as
HEADERS and DATA frames. Neither parses the other's bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

__all__ = ["END", "Body", "End", "Fields", "Head", "Part", "error_parts"]

# Header fields in the order they are sent: (name, value), as the recording spelled them.
Fields = tuple[tuple[bytes, bytes], ...]


@dataclass(frozen=True, slots=True)
class Head:
    """The status and header fields of a response.

    ``headers`` hold what the response says end to end, in order, ``content-length`` among
    them when the body has a size; ``chunked``: the body's size is not said, it comes in
    pieces until :data:`END` (HTTP/1.1 adds ``transfer-encoding: chunked`` after the fields
    and frames each piece as a chunk; HTTP/2 sends each as DATA)."""

    status: int
    reason: bytes = b""  # HTTP/1.1's reason phrase ("OK"); empty: none (HTTP/2 has none)
    headers: Fields = ()
    chunked: bool = False


class Body(NamedTuple):
    """A piece of the body, and when it is due: seconds from offset zero of the replay (the
    moment the whole request was in). A tuple: a long recording makes one per stored read,
    on the replay's path, and a tuple is the cheapest object to make."""

    at: float
    data: bytes


@dataclass(frozen=True, slots=True)
class End:
    """The response is whole (HTTP/1.1 chunked: the last chunk; HTTP/2: END_STREAM). A
    response that never gets one is cut: the connection (HTTP/2: the stream) is reset."""


END = End()

Part = Head | Body | End


def error_parts(
    status: int, body: bytes, content_type: bytes = b"text/plain", extra: Fields = ()
) -> tuple[Head, Body, End]:
    """ssetape's own answer (a miss, a recording it cannot read): a sized body, whole."""
    fields = ((b"content-type", content_type), (b"content-length", b"%d" % len(body)), *extra)
    return Head(status, b"Error", fields), Body(0.0, body), END
