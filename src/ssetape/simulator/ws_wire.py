"""One simulated WebSocket connection's server side (:class:`Wire`), and its record.

The handshake and the client's frames are :mod:`ssetape.framing.websocket`'s (wsproto,
sans-IO); the server's frames are written whole, one frame per message, never masked and
never compressed (permessage-deflate is declined), so a frame's bytes are its payload's. A
reader task takes the client's frames as they come, answers pings and the client's close at
once (a session busy answering still hears them), and hands each message over in order.

Every frame sent and received is kept in the :class:`Session` with when it went (for tests
that compare what ssetape stored with what the upstream said, byte for byte), in wire order:
the sessions' tasks share one event loop, and a frame is kept and written with no await
between.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import orjson

from ssetape.framing.websocket import BINARY, TEXT, Closed, Received, WebSocket, frame
from ssetape.simulator.scenario import keywords_of

__all__ = ["CLOSE_WAIT", "DELAY", "Frame", "Gone", "Session", "Wire", "asks", "payload_of"]

DELAY = 0.08  # seconds between two deltas, and before a response's first (at speed 1)
CLOSE_WAIT = 10.0  # seconds a server's close waits for the client's before the TCP close
_READ = 1 << 16


@dataclass
class Frame:
    binary: bool
    payload: bytes
    at: float  # time.monotonic() (the loop's clock) when sent or received


@dataclass
class Session:
    """One connection as the upstream saw it: the upgrade's target and headers (their names
    as the client spelt them), and the frames each way."""

    path: str
    headers: dict[str, str]
    sent: list[Frame] = field(default_factory=list)
    received: list[Frame] = field(default_factory=list)
    opened: float = 0.0


class Gone(Exception):
    """The session is over (closed either way, or cut): nothing more can be sent."""


class Wire:
    """Sends and receives a session's messages on one upgraded connection; see the module."""

    def __init__(
        self,
        ws: WebSocket,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        session: Session,
        *,
        speed: float,
        ids: Iterator[int],
    ) -> None:
        self.session = session
        self.speed = speed
        self._ids = ids  # the simulator's: ids never repeat across its sessions
        self._ws, self._reader, self._writer = ws, reader, writer
        self._loop = asyncio.get_running_loop()
        self._inbox: asyncio.Queue[Frame | None] = asyncio.Queue()
        self._ended = asyncio.Event()  # the client's close came, or the connection ended
        self._reading: asyncio.Task[None] | None = None
        self.open = True  # False once a close went either way or the connection ended
        self.ending = "open"  # how it ended: "client", "closed <code>", "cut", "gone"

    @property
    def path(self) -> str:
        return self.session.path

    def now(self) -> float:
        return self._loop.time()

    def ident(self, prefix: str) -> str:
        return f"{prefix}_{next(self._ids):04d}"

    def start(self, pending: bytes) -> None:
        """Read the client's frames from here on: ``pending`` first (what came after the
        upgrade request's head)."""
        self._reading = asyncio.create_task(self._read(pending))

    async def receive(self) -> Frame | None:
        """The client's next message; None once the session is over."""
        return await self._inbox.get()

    async def until(self, start: float, seconds: float) -> None:
        """Wait for the deadline ``seconds`` (at speed 1) after ``start`` (a :meth:`now`):
        deadlines, not pauses, so a late wake-up is not carried to the frames after it."""
        delay = start + seconds / self.speed - self._loop.time()
        if delay > 0:
            await asyncio.sleep(delay)

    async def send(self, payload: bytes, *, binary: bool = False) -> None:
        """One message, written at once; :class:`Gone` if the session is over."""
        if not self.open or self._writer.is_closing():
            raise Gone
        self.session.sent.append(Frame(binary, payload, self._loop.time()))
        self._writer.write(frame(BINARY if binary else TEXT, payload))
        try:
            await self._writer.drain()
        except ConnectionError:
            self._lost()
            raise Gone from None

    async def send_json(self, obj: object, *, binary: bool = False) -> None:
        await self.send(orjson.dumps(obj), binary=binary)

    async def close(self, code: int, reason: str) -> None:
        """A close frame with ``code`` and ``reason``; the TCP connection closes at the
        client's close, or after :data:`CLOSE_WAIT`."""
        if not self.open:
            return
        self.open = False
        self.ending = f"closed {code}"
        self._writer.write(self._ws.close(code, reason))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ended.wait(), CLOSE_WAIT)
        self._writer.close()

    async def cut(self) -> None:
        """The TCP connection closed with no close frame (a crashed upstream, a dropped
        link); what was written before goes first."""
        if not self.open:
            return
        self.open = False
        self.ending = "cut"
        with contextlib.suppress(ConnectionError):
            await self._writer.drain()
        self._writer.close()

    async def finish(self) -> None:
        """After the session: stop reading and close the connection."""
        self.open = False
        if self._reading is not None:
            self._reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reading
        self._writer.close()

    async def _read(self, pending: bytes) -> None:
        data = pending
        while True:
            got, back = self._ws.receive(data) if data else ([], b"")
            if back and not self._writer.is_closing():
                self._writer.write(back)  # a pong, or the answer to the client's close
            for event in got:
                if isinstance(event, Received):
                    self._heard(event)
                elif isinstance(event, Closed):
                    self._ends("client" if self.open else self.ending)
                    return
            try:
                data = await self._reader.read(_READ)
            except (ConnectionError, OSError):
                data = b""
            if not data:
                self._lost()
                return

    def _heard(self, message: Received) -> None:
        got = Frame(message.binary, message.payload, self._loop.time())
        self.session.received.append(got)
        if self.open:
            self._inbox.put_nowait(got)

    def _lost(self) -> None:
        """The connection ended with no close frame from the client."""
        self._ends("gone" if self.open else self.ending)

    def _ends(self, how: str) -> None:
        self.open = False
        self.ending = how
        self._ended.set()
        self._inbox.put_nowait(None)


def asks(model: str, word: str) -> bool:
    """Whether a model name asks for the scenario ``word``: the name itself (as tests name
    their models: ``cut``) or a keyword after its ``sim`` word (``gpt-realtime-sim-cut``)."""
    return model == word or word in keywords_of(model)


def payload_of(raw: bytes) -> dict[str, object]:
    """A client message as a JSON object ({} when it is not one)."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {}
    return obj if isinstance(obj, dict) else {}
