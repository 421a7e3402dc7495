"""What the fake WebSocket upstreams share: the frames they keep (each with when it was sent
or received, for tests that compare them with what ssetape stored byte for byte), one
connection's record, and a sender that keeps the record in wire order when several lanes
send at once."""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field

import orjson
from websockets.sync.server import ServerConnection

__all__ = ["DELAY", "Frame", "Sender", "Session", "cut", "payload_of"]

DELAY = 0.08  # seconds between two deltas, and before a response's first


@dataclass
class Frame:
    binary: bool
    payload: bytes
    at: float  # time.monotonic() when sent or received


@dataclass
class Session:
    path: str
    headers: dict[str, str]
    sent: list[Frame] = field(default_factory=list)
    received: list[Frame] = field(default_factory=list)
    opened: float = 0.0

    def got(self, msg: str | bytes) -> bytes:
        """Keep a received message; its payload as bytes."""
        raw = msg if isinstance(msg, bytes) else msg.encode()
        self.received.append(Frame(isinstance(msg, bytes), raw, time.monotonic()))
        return raw


class Sender:
    """Sends frames on one connection and keeps them in ``session.sent``. One lock orders
    both, so the record is the wire's order when lanes run on threads of their own."""

    def __init__(self, ws: ServerConnection, session: Session) -> None:
        self._ws, self._session = ws, session
        self._lock = threading.Lock()

    def json(self, obj: object, *, binary: bool = False) -> None:
        self.raw(orjson.dumps(obj), binary=binary)

    def raw(self, payload: bytes, *, binary: bool) -> None:
        with self._lock:
            self._session.sent.append(Frame(binary, payload, time.monotonic()))
            self._ws.send(payload if binary else payload.decode())

    def close(self, code: int, reason: str) -> None:
        with self._lock:
            self._ws.close(code, reason)


def cut(ws: ServerConnection) -> None:
    """TCP closed with no close frame: a crashed upstream or a dropped link."""
    ws.socket.shutdown(socket.SHUT_RDWR)
    ws.socket.close()


def payload_of(raw: bytes) -> dict[str, object]:
    """A client message as a JSON object ({} when it is not one)."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {}
    return obj if isinstance(obj, dict) else {}
