"""HTTP/2 for the direct replay server: on a TLS connection whose client chose ``h2``, or in
clear text to a client that starts with HTTP/2's preface (prior knowledge, "h2c").

Replay servers answer in typed parts (:mod:`ssetape.replay.response_parts`: a head, body
pieces at their deadlines, an end; see :class:`~ssetape.replay.player.Player`). Here each
HTTP/2 stream is an :class:`H2Stream`, the writer that sends those parts as HEADERS and DATA
frames (the ``h2`` library frames them), so timing stays the player's: a piece written at its
deadline leaves at once, unless the client's flow-control window holds it back, as it would
hold back a real server.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Sequence
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
from ssetape.replay.response_parts import Body, Head, Part
from ssetape.replay.stamped_reader import arrival

__all__ = ["H2Server", "H2Stream"]

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
        self.streams: dict[int, H2Stream] = {}
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
                    s.pump()
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
        stream = H2Stream(self, sid, head_only=method == b"HEAD")
        self.streams[sid] = stream
        task = asyncio.get_running_loop().create_task(self._serve_stream(
            stream, [method, target, b"HTTP/2"], headers, body.body(), self._at))  # fmt: skip
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve_stream(
        self,
        stream: H2Stream,
        request_line: list[bytes],
        headers: dict[bytes, bytes],
        body: bytes,
        at: float,
    ) -> None:
        try:
            await self.respond(stream, request_line, headers, body, at)
        except ConnectionError:
            pass
        finally:
            stream.close()  # a response that never said its end ends here
            self.streams.pop(stream.sid, None)

    def flush(self) -> None:
        data = self.conn.data_to_send()
        if data and not self.writer.transport.is_closing():
            self.writer.write(data)


class H2Stream:
    """The writer of one HTTP/2 stream's response: its head becomes HEADERS (less the
    connection's own fields, which HTTP/2 forbids), its body DATA (no more than its
    content-length says), its end END_STREAM, and an abort RST_STREAM (a recording cut short
    ends the same way over HTTP/2)."""

    def __init__(self, server: H2Server, sid: int, *, head_only: bool) -> None:
        self.server = server
        self.sid = sid
        self.head_only = head_only
        self._headed = False  # HEADERS sent
        self._chunked = False
        self._left: int | None = None  # bytes of a sized body still to come
        self._out: deque[bytes] = deque()  # body bytes waiting for the client's window
        self._held = 0
        self._paused = False  # drain() waits (the client's window holds too much back)
        self._resumed: asyncio.Future[None] | None = None  # what a waiting drain() awaits
        self._ended = False  # END_STREAM decided (sent once _out is empty)
        self._closed = False  # nothing more goes out: ended and sent, reset, or lost
        self._lost = False  # reset or lost: a drain() raises

    # the response writer
    def frame(self, parts: Sequence[Part]) -> Sequence[Part]:
        return parts  # h2 frames them as they are written: the window decides the frames

    def write(self, framed: Sequence[Part]) -> None:
        for part in framed:
            if self._closed or self._ended:
                break  # a bodiless head ended it: what follows is not sent
            if isinstance(part, Body):
                self._body(part.data)
            elif isinstance(part, Head):
                if not self._send_head(part):
                    return
            else:
                self._ended = True
        self.pump()

    def send(self, parts: Sequence[Part]) -> None:
        self.write(parts)  # nothing to frame ahead

    def is_closing(self) -> bool:
        return self._closed

    def close(self) -> None:
        """The responder is done: a response it did not end is cut, unless its body was to
        run until the connection closed (no size said)."""
        if self._closed:
            return
        if self._headed and not self._chunked and self._left is None:
            self._ended = True
            self.pump()
        elif not self._ended:
            self.abort()

    def abort(self) -> None:
        if self._closed:
            return
        with contextlib.suppress(H2Error):
            self.server.conn.reset_stream(self.sid, ErrorCodes.INTERNAL_ERROR)
            self.server.flush()
        self.lost()

    async def drain(self) -> None:
        while self._paused and not self._lost:
            if self._resumed is None:
                self._resumed = asyncio.get_running_loop().create_future()
            await self._resumed
        if self._lost:
            raise ConnectionResetError("the HTTP/2 stream was reset or its connection lost")

    # the stream
    def lost(self) -> None:
        """The stream or the connection went away: writers stop, drains raise."""
        if self._closed:
            return
        self._closed = self._lost = True
        self._out.clear()
        self._wake()

    def pump(self) -> None:
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
                    self._out.popleft()
            if self._ended and not self._out:
                conn.end_stream(self.sid)
                self._closed = True
        except H2Error:
            self.lost()
        self.server.flush()
        if self._paused and self._held < PAUSE_AT // 2:
            self._paused = False
            self._wake()

    def _wake(self) -> None:
        if self._resumed is not None and not self._resumed.done():
            self._resumed.set_result(None)
        self._resumed = None

    def _send_head(self, head: Head) -> bool:
        self._headed = True
        self._chunked = head.chunked
        headers = [(b":status", b"%d" % head.status)]
        for name, value in head.headers:
            name = name.lower()
            if name in HOP_BY_HOP:
                continue
            if name == b"content-length" and not head.chunked:
                with contextlib.suppress(ValueError):
                    self._left = int(value)
            headers.append((name, value))
        status = head.status
        bodiless = self.head_only or status in (204, 304) or status < 200
        try:
            self.server.conn.send_headers(self.sid, headers)
        except H2Error:
            self.abort()
            return False
        if bodiless or (self._left == 0 and not self._chunked):
            self._ended = True
        return True

    def _body(self, data: bytes) -> None:
        if self._left is not None:
            data = data[: self._left]
            self._left -= len(data)
        self._queue(data)
        if self._left == 0:
            self._ended = True

    def _queue(self, data: bytes) -> None:
        if data:
            self._out.append(data)
            self._held += len(data)
            if self._held >= PAUSE_AT:
                self._paused = True
