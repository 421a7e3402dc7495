"""The HTTP/1.1 side of ssetape's replay servers: connections, requests, and the writer that
frames a response's parts as HTTP/1.1.

Replay servers only read requests and write responses; what they answer is a
:data:`Responder`'s business (the timed server's, the direct front's). Each connection serves
requests until either side closes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import socket
import ssl
import struct
import time
from collections.abc import Sequence
from urllib.parse import urlsplit

from ssetape.recording.body_tap import BodyTap
from ssetape.replay.admission import Admission, on_this_machine
from ssetape.replay.responder import Responder, TlsFor, error_response
from ssetape.replay.response_parts import Body, Head, Part
from ssetape.replay.stamped_reader import StampedReader, arrival
from ssetape.replay.ws_session import WsUpgrade

__all__ = [
    "BadRequest",
    "Http1Writer",
    "HttpServer",
    "parse_head",
    "raise_fd_limit",
    "read_body",
]

log = logging.getLogger("ssetape.replay")

HEAD_TIMEOUT = 60.0  # seconds a connection may take to send a request head, or wait for one


def raise_fd_limit(cap: int = 1 << 16) -> int:
    """Raise this process's soft descriptor limit to its hard one (at most ``cap``), as Go
    programs do at start: the soft default (1,024) is far below what a busy proxy needs.
    Returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = cap if hard == resource.RLIM_INFINITY else min(hard, cap)
    if soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (OSError, ValueError):
            pass  # a container may forbid it: the cap below follows the limit in force
    return soft


# What a client speaking HTTP/2 without TLS sends first, up to where a head would end (the
# rest of its preface, "SM\r\n\r\n", follows).
H2C_PREFACE = b"PRI * HTTP/2.0\r\n\r\n"


class HttpServer:
    """Serves one :data:`Responder` over HTTP/1.1 keep-alive connections, HTTP/2 in tunnels
    whose client chose it, and HTTP/2 in clear text to a client that starts with it."""

    def __init__(
        self,
        respond: Responder,
        *,
        head_timeout: float = HEAD_TIMEOUT,
        tls: TlsFor | None = None,
        admission: Admission | None = None,
    ) -> None:
        self.respond = respond
        self.head_timeout = head_timeout
        # Forward mode: CONNECT opens a tunnel that this server ends with TLS itself (the
        # leaf certificates of `ssetape ca`); requests in it are matched on its host.
        self.tls = tls
        self.refused_tls = 0  # handshakes clients refused (they do not trust the CA)
        self.server: asyncio.Server | None = None
        # How many TLS handshakes run at once (see its module).
        self.admission = admission or Admission()
        self._open: set[asyncio.StreamWriter] = set()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open.add(writer)
        out = Http1Writer(writer)
        tunnel: bytes | None = None  # the authority of the CONNECT this connection carries
        first = True  # h2c's preface counts only as a connection's first bytes
        # When the last answer on this connection was written: a request pipelined behind it
        # (read from the same bytes) cannot start its timing before its turn came.
        answered = 0.0
        try:
            while True:
                # A client that never completes a head (or sits idle between requests) does
                # not hold its connection for good.
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.head_timeout)
                if head == H2C_PREFACE and first:
                    # HTTP/2 in clear text, with prior knowledge (RFC 9113, 3.3): the client
                    # speaks it from its first byte, which read as a head up to here.
                    from ssetape.replay.h2_server import H2Server

                    await H2Server(self.respond, reader, writer, b"", self.head_timeout,
                                   preface=head).serve()  # fmt: skip
                    break
                first = False
                request_line, headers = parse_head(head)
                if self.tls is not None and tunnel is None and request_line[0] == b"CONNECT":
                    tunnel = request_line[1] if len(request_line) > 1 else b""
                    if not await self._open_tunnel(writer, tunnel):
                        break
                    out = Http1Writer(writer)  # over TLS now: a new transport
                    if _alpn(writer) == "h2":
                        # Here only: h2 comes with mitmproxy, which plain replay never needs.
                        from ssetape.replay.h2_server import H2Server

                        await H2Server(self.respond, reader, writer, tunnel,
                                       self.head_timeout).serve()  # fmt: skip
                        break
                    continue
                if tunnel is not None and request_line[1:2] and request_line[1][:1] == b"/":
                    request_line[1] = b"https://" + tunnel + request_line[1]
                try:
                    body = await read_body(reader, headers, self.head_timeout)
                except BadRequest as e:
                    error_response(out, 400, f"ssetape: {e}", extra=((b"connection", b"close"),))
                    await writer.drain()
                    break
                at = max(arrival(reader), answered)
                # A WebSocket upgrade: the player may take the connection over for a session.
                out.upgrade = upgrade = WsUpgrade.of(head, request_line, headers, reader, writer)
                keep = await self.respond(out, request_line, headers, body, at)
                answered = time.monotonic()
                if upgrade is not None:  # a session ran, or the upgrade was answered otherwise
                    await writer.drain()
                    break
                if not keep or headers.get(b"connection", b"").lower() == b"close":
                    await writer.drain()
                    break
        except (
            asyncio.IncompleteReadError,
            ConnectionError,
            asyncio.LimitOverrunError,
            TimeoutError,
        ):
            pass
        finally:
            self._open.discard(writer)
            writer.close()

    async def _open_tunnel(self, writer: asyncio.StreamWriter, authority: bytes) -> bool:
        """Answer CONNECT and end its TLS here: False if the handshake failed."""
        assert self.tls is not None
        host = urlsplit("//" + authority.decode("latin-1")).hostname or ""
        if not host:
            error_response(Http1Writer(writer), 400, "ssetape: CONNECT names no host")
            return False
        # A new host's certificate is signed on first use: not on the loop.
        ctx = self.tls.cached(host)
        if ctx is None:
            ctx = await asyncio.get_running_loop().run_in_executor(None, self.tls.context, host)
        # A client far away is paced by its round trips, and its loop is not on this machine:
        # only near ones wait for a slot (a slot held for two long round trips would cap
        # remote bursts at a few handshakes per round trip).
        rtt = _round_trip(writer)
        near = rtt < NEAR if rtt is not None else _loopback(writer)
        async with self.admission.slot() if near else contextlib.nullcontext():
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
            try:
                await asyncio.wait_for(writer.start_tls(ctx), self.head_timeout)
            except (ssl.SSLError, OSError, TimeoutError) as e:
                self.refused_tls += 1
                if self.refused_tls == 1:
                    log.warning(
                        "ssetape: a client ended TLS for %s (%s); does it trust the CA that "
                        "`ssetape ca` shows?", host, getattr(e, "reason", None) or type(e).__name__,
                    )  # fmt: skip
                return False
        return True

    async def start(self, host: str, port: int, *, reuse_port: bool = False) -> int:
        """Listen; the port it listens on."""
        # A burst of a few hundred clients must not overflow the default backlog (100).
        # reuse_port: several processes listen on this one port, the kernel spreads the
        # connections among them (`ssetape replay --workers`).
        loop = asyncio.get_running_loop()

        def connection() -> asyncio.StreamReaderProtocol:  # as asyncio.start_server makes it
            return asyncio.StreamReaderProtocol(StampedReader(), self.handle)

        self.server = await loop.create_server(
            connection, host, port, backlog=4096, reuse_port=reuse_port or None
        )
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


class Http1Writer:
    """A response's parts framed as HTTP/1.1 on one connection: the status line and header
    lines, then the body as it is (its size is among the fields) or chunked."""

    __slots__ = ("_chunked", "transport", "upgrade", "writer")

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.transport = writer.transport
        self._chunked = False  # of the response being framed (its head says)
        # The request being answered asks for a WebSocket session: its connection.
        self.upgrade: WsUpgrade | None = None

    def frame(self, parts: Sequence[Part]) -> bytes:
        if len(parts) == 1 and type(part := parts[0]) is Body and self._chunked:
            data = part.data  # a timed stream's every write but its first and last: no list
            return b"%x\r\n%s\r\n" % (len(data), data) if data else b""
        out: list[bytes] = []
        for part in parts:
            if isinstance(part, Body):
                if data := part.data:  # empty: nothing to write (a chunk of 0 would end it)
                    out.append(b"%x\r\n%s\r\n" % (len(data), data) if self._chunked else data)
            elif isinstance(part, Head):
                out.append(head_bytes(part))
                self._chunked = part.chunked
            elif self._chunked:  # the end of a chunked body: its last chunk
                out.append(b"0\r\n\r\n")
                self._chunked = False
        return out[0] if len(out) == 1 else b"".join(out)  # one part: no copy

    def write(self, framed: bytes) -> None:
        self.transport.write(framed)

    def send(self, parts: Sequence[Part]) -> None:
        self.transport.write(self.frame(parts))

    def is_closing(self) -> bool:
        return self.transport.is_closing()

    def abort(self) -> None:
        self.transport.abort()

    async def drain(self) -> None:
        await self.writer.drain()


def head_bytes(head: Head) -> bytes:
    """The status line and header lines (``transfer-encoding: chunked`` last, when chunked)."""
    first = b"HTTP/1.1 %d" % head.status
    if head.reason:
        first += b" " + head.reason
    lines = [first, *(b"%s: %s" % field for field in head.headers)]
    if head.chunked:
        lines.append(b"transfer-encoding: chunked")
    return b"\r\n".join(lines) + b"\r\n\r\n"


NEAR = 0.002  # seconds of round trip under which a client counts as on this machine (or LAN)


def _round_trip(writer: asyncio.StreamWriter) -> float | None:
    """The connection's smoothed round-trip time as the kernel measures it (``TCP_INFO``
    on Linux and FreeBSD), in seconds; None where it cannot be read."""
    sock = writer.get_extra_info("socket")
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
        return float(struct.unpack_from("I", info, 68)[0]) / 1e6  # tcpi_rtt, microseconds
    except (AttributeError, OSError, struct.error):
        return None


def _loopback(writer: asyncio.StreamWriter) -> bool:
    """Whether the peer is this machine (where its round trip cannot be read)."""
    return on_this_machine(writer.get_extra_info("peername"))


def _alpn(writer: asyncio.StreamWriter) -> str | None:
    ssl_object = writer.get_extra_info("ssl_object")
    return ssl_object.selected_alpn_protocol() if ssl_object is not None else None


def parse_head(head: bytes) -> tuple[list[bytes], dict[bytes, bytes]]:
    """(request line split in words, lower-cased header names -> values)."""
    lines = head.split(b"\r\n")
    out: dict[bytes, bytes] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if sep:
            out[name.strip().lower()] = value.strip()
    return lines[0].split(b" "), out


class BadRequest(ValueError):
    """A request the server cannot read (malformed framing); the message says why."""


async def read_body(
    reader: asyncio.StreamReader, headers: dict[bytes, bytes], idle: float | None = None
) -> bytes:
    """The request's body (its stand-in past MAX_BODY); BadRequest if it is not framed
    right. Read in pieces: a declared 5 GB body never sits in memory. ``idle``: seconds a
    read may wait for the next byte (TimeoutError past it), so a client that stalls inside
    its body does not hold its connection for good; a slow upload that moves is served."""
    body = BodyTap()
    if b"chunked" in headers.get(b"transfer-encoding", b"").lower():
        while True:
            line = (await asyncio.wait_for(reader.readuntil(b"\r\n"), idle)).split(b";")[0].strip()
            try:
                size = int(line, 16)
            except ValueError:
                raise BadRequest(f"bad chunk size {line[:20]!r}") from None
            if size < 0:
                raise BadRequest("bad chunk size")
            await _read_into(reader, body, size, idle)
            await asyncio.wait_for(reader.readexactly(2), idle)  # the chunk's CRLF
            if size == 0:  # no trailers: its CRLF was read with it
                return body.body()
    length = headers.get(b"content-length", b"0").strip() or b"0"
    if not length.isdigit():
        raise BadRequest(f"bad Content-Length {length[:20]!r}")
    await _read_into(reader, body, int(length), idle)
    return body.body()


async def _read_into(
    reader: asyncio.StreamReader, body: BodyTap, n: int, idle: float | None
) -> None:
    while n > 0:
        data = await asyncio.wait_for(reader.read(min(n, 1 << 16)), idle)
        if not data:
            raise asyncio.IncompleteReadError(b"", n)
        body(data)
        n -= len(data)
