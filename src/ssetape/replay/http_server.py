"""The HTTP/1.1 side of ssetape's replay servers: connections, requests, error answers.

Replay servers only read requests and write recorded bytes; what they answer is a
:data:`Responder`'s business (the timed server's, the direct front's). Each connection serves
requests until either side closes it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

__all__ = ["HttpServer", "Responder", "error_response", "parse_head", "read_body"]

# (writer, request line split in words, lower-cased header names -> values, body) -> whether
# the connection may serve another request.
Responder = Callable[
    [asyncio.StreamWriter, list[bytes], dict[bytes, bytes], bytes], Awaitable[bool]
]


class HttpServer:
    """Serves one :data:`Responder` over HTTP/1.1 keep-alive connections."""

    def __init__(self, respond: Responder) -> None:
        self.respond = respond
        self.server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                request_line, headers = parse_head(head)
                body = await read_body(reader, headers)
                keep = await self.respond(writer, request_line, headers, body)
                if not keep or headers.get(b"connection", b"").lower() == b"close":
                    await writer.drain()
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            self._open.discard(writer)
            writer.close()

    async def start(self, host: str, port: int) -> int:
        """Listen; the port it listens on."""
        # A burst of a few hundred clients must not overflow the default backlog (100).
        self.server = await asyncio.start_server(self.handle, host, port, backlog=4096)
        bound: int = self.server.sockets[0].getsockname()[1]
        return bound

    async def stop(self, grace: float = 2.0) -> None:
        """Stop listening; streams still playing end, as a real server going away ends them."""
        if self.server is None:
            return
        self.server.close()
        for writer in list(self._open):
            writer.transport.abort()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.server.wait_closed(), grace)


def error_response(
    writer: asyncio.StreamWriter,
    status: int,
    body: str | bytes,
    content_type: str = "text/plain",
    extra: bytes = b"",
) -> None:
    data = body.encode() if isinstance(body, str) else body
    writer.write(
        b"HTTP/1.1 %d Error\r\ncontent-type: %s\r\ncontent-length: %d\r\n%s\r\n%s"
        % (status, content_type.encode(), len(data), extra, data)
    )


def parse_head(head: bytes) -> tuple[list[bytes], dict[bytes, bytes]]:
    """(request line split in words, lower-cased header names -> values)."""
    lines = head.split(b"\r\n")
    out: dict[bytes, bytes] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if sep:
            out[name.strip().lower()] = value.strip()
    return lines[0].split(b" "), out


async def read_body(reader: asyncio.StreamReader, headers: dict[bytes, bytes]) -> bytes:
    if b"chunked" in headers.get(b"transfer-encoding", b"").lower():
        parts = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            parts.append((await reader.readexactly(size + 2))[:-2])
            if size == 0:  # no trailers: its CRLF was read with it
                return b"".join(parts)
    n = int(headers.get(b"content-length", b"0") or 0)
    return await reader.readexactly(n) if n else b""
