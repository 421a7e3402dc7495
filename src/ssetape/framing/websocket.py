"""The server side of a WebSocket connection (RFC 6455), sans-IO: what ssetape's replay server
speaks to a client that opens a recorded session.

The handshake and the client's frames are wsproto's: it computes ``Sec-WebSocket-Accept`` for
the client's key and reads frames that are masked, may come in fragments and interleave with
pings. What the server sends of a recording is framed by :func:`frame`, once per recording
ahead of the replay, so that a frame due at its offset is written, not built, then: a server's
frames are never masked, and with no extension agreed (permessage-deflate, which the
``websockets`` library offers by default, is declined) one message is one frame, so its bytes
depend on nothing but its opcode and payload.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    RejectConnection,
    Request,
    TextMessage,
)
from wsproto.utilities import RemoteProtocolError

__all__ = [
    "BINARY",
    "TEXT",
    "Closed",
    "HandshakeRefused",
    "Received",
    "WebSocket",
    "frame",
    "payload_of",
]

TEXT, BINARY = 0x1, 0x2
MAX_REASON = 123  # bytes of a close reason: a control frame's payload is 125 at most


def frame(opcode: int, payload: bytes) -> bytes:
    """One whole unmasked message frame (FIN set) of ``opcode`` carrying ``payload``."""
    n = len(payload)
    first = 0x80 | opcode
    if n < 126:
        head = struct.pack("!BB", first, n)
    elif n < 1 << 16:
        head = struct.pack("!BBH", first, 126, n)
    else:
        head = struct.pack("!BBQ", first, 127, n)
    return head + payload


def payload_of(framed: bytes) -> bytes:
    """The payload of a frame :func:`frame` made (unmasked, its length in its header)."""
    n = framed[1] & 0x7F
    return framed[2 if n < 126 else 4 if n == 126 else 10 :]


def short_reason(reason: str) -> str:
    """``reason`` cut to what a close frame carries, never inside a character."""
    data = reason.encode()
    if len(data) <= MAX_REASON:
        return reason
    return data[:MAX_REASON].decode("utf-8", "ignore")


@dataclass(frozen=True, slots=True)
class Received:
    """One whole message from the client."""

    binary: bool
    payload: bytes


@dataclass(frozen=True, slots=True)
class Closed:
    """The client closed (``code`` 1006: the connection ended with no close frame)."""

    code: int
    reason: str


class HandshakeRefused(ValueError):
    """The upgrade request is not one a WebSocket server may accept; ``answer`` is the HTTP
    response that says so."""

    def __init__(self, why: str, answer: bytes) -> None:
        super().__init__(why)
        self.answer = answer


class WebSocket:
    """One connection's server side: :meth:`request` with the upgrade request's head,
    :meth:`accept`, then :meth:`receive` what the client sends; :meth:`close` to end."""

    def __init__(self) -> None:
        self._ws = WSConnection(ConnectionType.SERVER)
        self.subprotocols: list[str] = []  # those the client offered
        self.extensions: list[str] = []  # those the client offered (all declined)
        self._text: list[str] = []  # the fragments of a message still coming
        self._data: list[bytes] = []

    def request(self, head: bytes) -> None:
        """Read the upgrade request (its head, up to its blank line)."""
        try:
            self._ws.receive_data(head)
            events = list(self._ws.events())
        except RemoteProtocolError as e:
            hint = e.event_hint if isinstance(e.event_hint, RejectConnection) else None
            answer = self._ws.send(hint or RejectConnection(status_code=400))
            raise HandshakeRefused(str(e), answer) from None
        request = next((ev for ev in events if isinstance(ev, Request)), None)
        if request is None:
            raise HandshakeRefused("no upgrade request", b"")
        self.subprotocols = list(request.subprotocols)
        self.extensions = [str(e) for e in request.extensions]

    def accept(self, subprotocol: str | None, headers: list[tuple[bytes, bytes]]) -> bytes:
        """The 101 for the client's key: ``subprotocol`` (one the client offered, or None)
        and ``headers`` besides the handshake's own; no extension agreed."""
        event = AcceptConnection(subprotocol=subprotocol, extensions=[], extra_headers=headers)
        return self._ws.send(event)

    def receive(self, data: bytes | None) -> tuple[list[Received | Closed], bytes]:
        """What ``data`` completes (None: the connection ended), and what must be sent back
        at once: pongs, the answer to a close."""
        if self._ws.state is ConnectionState.CLOSED:
            return [], b""  # what comes after a close went both ways means nothing
        self._ws.receive_data(data)
        got: list[Received | Closed] = []
        back: list[bytes] = []
        for ev in self._ws.events():
            if isinstance(ev, TextMessage):
                self._text.append(ev.data)
                if ev.message_finished:
                    got.append(Received(False, "".join(self._text).encode()))
                    self._text.clear()
            elif isinstance(ev, BytesMessage):
                self._data.append(bytes(ev.data))
                if ev.message_finished:
                    got.append(Received(True, b"".join(self._data)))
                    self._data.clear()
            elif isinstance(ev, Ping):
                back.append(self._ws.send(ev.response()))
            elif isinstance(ev, CloseConnection):
                got.append(Closed(ev.code, ev.reason or ""))
                if self._ws.state is ConnectionState.REMOTE_CLOSING:
                    back.append(self._ws.send(ev.response()))
                elif self._ws.state is ConnectionState.OPEN:  # frames it could not read
                    back.append(self.close(ev.code, ev.reason or ""))
        return got, b"".join(back)

    def close(self, code: int, reason: str = "") -> bytes:
        """A close frame (empty once a close went either way)."""
        if self._ws.state not in (ConnectionState.OPEN, ConnectionState.REMOTE_CLOSING):
            return b""
        return self._ws.send(CloseConnection(code=code, reason=short_reason(reason) or None))

    @property
    def closed(self) -> bool:
        """A close went both ways (or the connection ended)."""
        return self._ws.state is ConnectionState.CLOSED
