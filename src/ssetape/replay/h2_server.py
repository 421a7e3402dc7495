"""HTTP/2 for the direct replay server: on a TLS connection whose client chose ``h2``, or in
clear text to a client that starts with HTTP/2's preface (prior knowledge, "h2c").

Replay servers write HTTP/1.1 responses (recorded head, chunked pieces at their deadlines;
see :class:`~ssetape.replay.player.Player`). Here each HTTP/2 stream gets a real
:class:`asyncio.StreamWriter` over a :class:`StreamTransport` that reads that HTTP/1.1
response as it is written and sends it as HEADERS and DATA frames (the ``h2`` library frames
them), so timing stays the player's: a piece written at its deadline leaves at once, unless
the client's flow-control window holds it back, as it would hold back a real server.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.errors import ErrorCodes
from h2.events import (
    ConnectionTerminated,
    DataReceived,
    RequestReceived,
    StreamEnded,
    StreamReset,
    WindowUpdated,
)
from h2.exceptions import H2Error

from ssetape.recording.body_tap import BodyTap
from ssetape.replay.responder import Responder
from ssetape.replay.stamped_reader import arrival

__all__ = ["H2Server", "StreamTransport"]

MAX_HEAD = 1 << 16  # bytes of a response head, at most (a player writes its recorded head)
PAUSE_AT = 1 << 18  # bytes held for a stream's window before its writer's drain() waits
# HTTP/1.1 connection headers that HTTP/2 forbids (RFC 9113, section 8.2.2).
HOP_BY_HOP = frozenset(
    {b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade", b"te"}
)


class H2Server:
    """Serves the requests of one HTTP/2 connection, each stream with the responder."""

    def __init__(
        self,
        respond: Responder,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        authority: bytes,
        idle: float,
        *,
        preface: bytes = b"",
    ) -> None:
        self.respond = respond
        self.reader = reader
        self.writer = writer
        # Of the tunnel: requests are matched on its host. Empty without one (h2c): each
        # request's own :authority names it, and its path is the target, as in HTTP/1.1.
        self.authority = authority
        self.preface = preface  # what the connection already read of the client's preface
        self.idle = idle
        self.conn = H2Connection(H2Configuration(client_side=False, header_encoding=None))
        self.streams: dict[int, StreamTransport] = {}
        self._bodies: dict[int, tuple[list[tuple[bytes, bytes]], BodyTap]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._at = 0.0  # when the bytes being handled arrived (time.monotonic())

    async def serve(self) -> None:
        self.conn.initiate_connection()
        self.flush()
        try:
            if self.preface:
                self.conn.receive_data(self.preface)  # its start: no event before the rest
            while True:
                # Idle only bounds a connection that has nothing in flight.
                wait = None if self._tasks else self.idle
                data = await asyncio.wait_for(self.reader.read(1 << 16), wait)
                if not data:
                    break
                self._at = arrival(self.reader)  # of the requests these bytes complete
                try:
                    events = self.conn.receive_data(data)
                except H2Error:
                    break
                if not self._handle(events):
                    break
                self.flush()
        except (ConnectionError, TimeoutError):
            pass
        finally:
            for t in self._tasks:
                t.cancel()
            for s in list(self.streams.values()):
                s.lost()
            with contextlib.suppress(H2Error):
                self.conn.close_connection()
                self.flush()

    def _handle(self, events: list[Any]) -> bool:
        for ev in events:
            if isinstance(ev, RequestReceived):
                self._bodies[ev.stream_id] = (list(ev.headers), BodyTap())
            elif isinstance(ev, DataReceived):
                if ev.stream_id in self._bodies:
                    self._bodies[ev.stream_id][1](ev.data)
                self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, StreamEnded) and ev.stream_id in self._bodies:
                self._start(ev.stream_id, *self._bodies.pop(ev.stream_id))
            elif isinstance(ev, WindowUpdated):
                targets = self.streams.values() if ev.stream_id == 0 else (
                    [self.streams[ev.stream_id]] if ev.stream_id in self.streams else []
                )  # fmt: skip
                for s in list(targets):
                    s.send()
            elif isinstance(ev, StreamReset):
                self._bodies.pop(ev.stream_id, None)
                if (reset := self.streams.get(ev.stream_id)) is not None:
                    reset.lost()
            elif isinstance(ev, ConnectionTerminated):
                return False
        return True

    def _start(self, sid: int, raw: list[tuple[bytes, bytes]], body: BodyTap) -> None:
        pseudo = {k: v for k, v in raw if k.startswith(b":")}
        headers = {k.lower(): v for k, v in raw if not k.startswith(b":")}
        headers.setdefault(b"host", pseudo.get(b":authority", self.authority))
        method, path = pseudo.get(b":method", b"GET"), pseudo.get(b":path", b"/")
        tunneled = self.authority and path.startswith(b"/")
        target = b"https://" + self.authority + path if tunneled else path
        loop = asyncio.get_running_loop()
        transport = StreamTransport(self, sid, head_only=method == b"HEAD")
        self.streams[sid] = transport
        protocol = asyncio.StreamReaderProtocol(asyncio.StreamReader())
        transport.protocol = protocol
        writer = asyncio.StreamWriter(transport, protocol, None, loop)
        task = loop.create_task(self._serve_stream(writer, [method, target, b"HTTP/2"],
                                                   headers, body.body(), self._at))  # fmt: skip
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve_stream(
        self,
        writer: asyncio.StreamWriter,
        request_line: list[bytes],
        headers: dict[bytes, bytes],
        body: bytes,
        at: float,
    ) -> None:
        transport = writer.transport
        assert isinstance(transport, StreamTransport)
        try:
            await self.respond(writer, request_line, headers, body, at)
        except ConnectionError:
            pass
        finally:
            transport.close()  # a response that never said its end ends here
            self.streams.pop(transport.sid, None)

    def flush(self) -> None:
        data = self.conn.data_to_send()
        if data and not self.writer.transport.is_closing():
            self.writer.write(data)


class StreamTransport(asyncio.WriteTransport):
    """One HTTP/2 stream, written to as if it were an HTTP/1.1 connection: the response's
    head becomes HEADERS, its body (chunked or sized) DATA, its end END_STREAM, and an abort
    RST_STREAM (a recording cut short ends the same way over HTTP/2)."""

    def __init__(self, server: H2Server, sid: int, *, head_only: bool) -> None:
        super().__init__()
        self.server = server
        self.sid = sid
        self.head_only = head_only
        self.protocol: asyncio.StreamReaderProtocol | None = None
        self._head: bytes | None = b""  # until the head is whole
        self._chunked = False
        self._left: int | None = None  # bytes of a sized body still to come
        self._buf = b""  # chunked framing not yet whole
        self._out: list[bytes] = []  # body bytes waiting for the client's window
        self._held = 0
        self._paused = False  # the writer's drain() waits (its protocol asserts each change)
        self._ended = False  # END_STREAM decided (sent once _out is empty)
        self._closed = False  # nothing more goes out: ended and sent, reset, or lost

    # asyncio.WriteTransport
    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closed or self._ended:
            return
        data = bytes(data)
        if self._head is not None:
            self._head += data
            end = self._head.find(b"\r\n\r\n")
            if end < 0:
                if len(self._head) > MAX_HEAD:
                    self.abort()
                return
            head, data = self._head[:end], self._head[end + 4 :]
            self._head = None
            if not self._send_head(head):
                return
        self._body(data)
        self.send()

    def is_closing(self) -> bool:
        return self._closed

    def close(self) -> None:
        if self._closed:
            return
        if self._head is None and not self._chunked and self._left is None:
            self._end()  # a body that ran until the connection closed ends here
            self.send()
        elif not self._ended:
            self.abort()

    def abort(self) -> None:
        if self._closed:
            return
        with contextlib.suppress(H2Error):
            self.server.conn.reset_stream(self.sid, ErrorCodes.INTERNAL_ERROR)
            self.server.flush()
        self.lost()

    def get_write_buffer_size(self) -> int:
        return self._held

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.server.writer.get_extra_info(name, default)

    # the stream
    def lost(self) -> None:
        """The stream or the connection went away: writers stop, drains raise."""
        if self._closed:
            return
        self._closed = True
        self._out.clear()
        if self.protocol is not None:
            self.protocol.connection_lost(None)

    def send(self) -> None:
        """Send what the window allows; END_STREAM once all of it is out."""
        if self._closed:
            return
        conn = self.server.conn
        try:
            while self._out:
                room = min(conn.local_flow_control_window(self.sid), conn.max_outbound_frame_size)
                if room <= 0:
                    break
                piece = self._out[0]
                conn.send_data(self.sid, piece[:room])
                self._held -= min(room, len(piece))
                if len(piece) > room:
                    self._out[0] = piece[room:]
                else:
                    self._out.pop(0)
            if self._ended and not self._out:
                conn.end_stream(self.sid)
                self._closed = True
        except H2Error:
            self.lost()
        self.server.flush()
        if self._paused and self._held < PAUSE_AT // 2 and self.protocol is not None:
            self._paused = False
            self.protocol.resume_writing()

    def _send_head(self, head: bytes) -> bool:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        status = parts[1] if len(parts) > 1 and parts[1].isdigit() else b""
        if not status:
            self.abort()
            return False
        headers = [(b":status", status)]
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            name = name.strip().lower()
            if not sep or name in HOP_BY_HOP:
                if name == b"transfer-encoding" and b"chunked" in value.lower():
                    self._chunked = True
                continue
            if name == b"content-length" and not self._chunked:
                with contextlib.suppress(ValueError):
                    self._left = int(value.strip())
            headers.append((name, value.strip()))
        bodiless = self.head_only or status in (b"204", b"304") or status.startswith(b"1")
        try:
            self.server.conn.send_headers(self.sid, headers)
        except H2Error:
            self.abort()
            return False
        if bodiless or (self._left == 0 and not self._chunked):
            self._end()
        return True

    def _body(self, data: bytes) -> None:
        if self._ended or not data:
            return
        if not self._chunked:
            if self._left is not None:
                data = data[: self._left]
                self._left -= len(data)
            self._queue(data)
            if self._left == 0:
                self._end()
            return
        self._buf += data
        while True:
            line_end = self._buf.find(b"\r\n")
            if line_end < 0:
                return
            try:
                size = int(self._buf[:line_end].split(b";")[0], 16)
            except ValueError:
                self.abort()
                return
            if size == 0:
                self._end()
                return
            if len(self._buf) < line_end + 2 + size + 2:
                return
            self._queue(self._buf[line_end + 2 : line_end + 2 + size])
            self._buf = self._buf[line_end + 2 + size + 2 :]

    def _queue(self, data: bytes) -> None:
        if data:
            self._out.append(data)
            self._held += len(data)
            if not self._paused and self._held >= PAUSE_AT and self.protocol is not None:
                self._paused = True
                self.protocol.pause_writing()

    def _end(self) -> None:
        self._ended = True
