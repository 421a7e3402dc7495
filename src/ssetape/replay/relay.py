"""The relay of record mode new_episodes: a miss sent to the recording proxy (`ssetape record`
on a loopback port) and its live answer streamed back to the client as it arrives.

Connections to the recording proxy are kept open between misses (HTTP/1.1 keep-alive, a few
of them idle at most). A new connection costs mitmproxy its connection objects and the hooks
of every addon, and a new upstream connection (with TLS, a handshake) for the proxy to forward
on; a kept one costs neither, so a test suite's misses one after another each save an
upstream handshake, and a burst of misses takes less CPU from the timed streams beside it.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import h11

from ssetape.replay.responder import ResponseWriter, error_response
from ssetape.replay.response_parts import END, Body, Head

__all__ = ["HOP", "UNREACHED", "Relay", "Relayed", "unreached"]

log = logging.getLogger("ssetape.replay")

READ = 1 << 16
IDLE_KEPT = 16  # idle connections kept to the recording proxy
# Not relayed: they describe one hop (ours to the recording proxy sets its own).
HOP = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding",
                 b"te", b"upgrade", b"content-length", b"trailer"})  # fmt: skip


@dataclass(slots=True)
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    h11: h11.Connection

    def usable(self) -> bool:
        """Still open (an idle connection the proxy closed has seen its end already)."""
        return not (self.writer.is_closing() or self.reader.at_eof())


class Relayed(NamedTuple):
    """What became of a relayed miss."""

    going_on: bool  # the client's connection can go on (False once its answer was cut)
    # The recording proxy answered (its head came back), so the recorder stores the exchange;
    # else the proxy never had it (down, or it closed first) and nothing is to be waited for.
    reached: bool


UNREACHED = Relayed(going_on=True, reached=False)  # a 502 of ours answered it


class _Stale(Exception):
    """A kept connection was closed before it answered: the request is sent anew."""


class Relay:
    """Misses to the recording proxy on ``port``, over connections kept between them."""

    def __init__(self, port: int) -> None:
        self.port = port
        self._idle: list[_Connection] = []

    async def send(
        self,
        out: ResponseWriter[Any],
        request_line: list[bytes],
        headers: dict[bytes, bytes],
        body: bytes,
    ) -> Relayed:
        """Send the request and stream its answer to ``out`` as it arrives."""
        target = request_line[1] if len(request_line) > 1 else b"/"
        fields = [(k, v) for k, v in headers.items() if k not in HOP]
        if b"host" not in headers:
            fields.append((b"host", urlsplit(target).netloc or b"localhost"))
        fields.append((b"content-length", b"%d" % len(body)))
        request = (h11.Request(method=request_line[0], target=target, headers=fields),
                   h11.Data(data=body), h11.EndOfMessage())  # fmt: skip
        kept = self._take()
        try:
            conn = kept or await self._open()
        except OSError as e:
            return unreached(out, e)
        try:
            return await self._exchange(conn, out, request, kept is not None)
        except _Stale:
            # It never answered: the proxy closed it idle, before the request reached it.
            try:
                conn = await self._open()
            except OSError as e:
                return unreached(out, e)
            return await self._exchange(conn, out, request, False)

    async def _exchange(
        self,
        conn: _Connection,
        out: ResponseWriter[Any],
        request: tuple[h11.Request, h11.Data, h11.EndOfMessage],
        kept: bool,
    ) -> Relayed:
        headed = heard = done = False
        try:
            for message in request:
                conn.writer.write(conn.h11.send(message) or b"")
            while True:
                event = conn.h11.next_event()
                if event is h11.NEED_DATA:
                    data = await conn.reader.read(READ)
                    if not data and kept and not heard:
                        raise _Stale
                    heard = True
                    conn.h11.receive_data(data)
                    continue
                if isinstance(event, h11.InformationalResponse):
                    continue
                if isinstance(event, h11.Response):
                    raw = event.headers.raw_items()
                    said = tuple((k, v) for k, v in raw if k.lower() not in HOP)
                    sized = [v for k, v in raw if k.lower() == b"content-length"]
                    if sized:
                        said = (*said, (b"content-length", sized[0]))
                    out.send((Head(event.status_code, event.reason, said, chunked=not sized),))
                    headed = True
                elif isinstance(event, h11.Data):
                    out.send((Body(0.0, bytes(event.data)),))
                    await out.drain()
                elif isinstance(event, h11.EndOfMessage):
                    out.send((END,))
                    done = True
                    return Relayed(going_on=True, reached=True)
                else:  # ConnectionClosed before the end
                    raise h11.RemoteProtocolError("the recording proxy closed the response")
        except ConnectionError:
            if kept and not heard:
                raise _Stale from None
            return self._failed(out, headed, "the recording proxy closed the connection")
        except (h11.ProtocolError, OSError) as e:
            return self._failed(out, headed, str(e))
        finally:
            self._give_back(conn, done)

    @staticmethod
    def _failed(out: ResponseWriter[Any], headed: bool, why: str) -> Relayed:
        if not headed:
            error_response(out, 502, f"ssetape: relaying a miss failed: {why}")
            return UNREACHED
        out.abort()  # cut where the upstream (or the proxy) cut it
        return Relayed(going_on=False, reached=True)

    async def _open(self) -> _Connection:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        return _Connection(reader, writer, h11.Connection(h11.CLIENT))

    def _take(self) -> _Connection | None:
        while self._idle:
            conn = self._idle.pop()
            if conn.usable():
                return conn
            conn.writer.close()
        return None

    def _give_back(self, conn: _Connection, done: bool) -> None:
        """Kept for the next miss if its exchange ended cleanly and both sides keep it."""
        both = conn.h11.our_state is h11.DONE and conn.h11.their_state is h11.DONE
        if done and both and len(self._idle) < IDLE_KEPT and conn.usable():
            conn.h11.start_next_cycle()
            self._idle.append(conn)
        else:
            conn.writer.close()

    def close(self) -> None:
        """Close the idle connections (the replay stops)."""
        for conn in self._idle:
            conn.writer.close()
        self._idle.clear()


def unreached(out: ResponseWriter[Any], e: OSError) -> Relayed:
    """Ssetape's 502 for a miss the recording proxy never had."""
    error_response(out, 502, f"ssetape: the recording proxy cannot be reached: {e}")
    return UNREACHED
