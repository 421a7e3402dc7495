"""The live streams a viewer serves at once: at most :attr:`LiveClients.limit`, each with a
bounded queue of what it has not been sent yet.

Each live stream polls the store every second and renders what is new, so every open one
costs reads, threads and memory whatever it does with them. Past the limit a new one is
answered 503 with a ``Retry-After`` (a page still loads; only its live updates wait). A
client that stops reading is not rendered for: its stream puts each message in a queue of
:data:`QUEUE` messages that a sender empties onto the connection; once the connection takes
nothing (its buffers are full) and the queue has stayed full :data:`STALL_S` seconds, the
client is dropped: its connection is closed, what was queued for it discarded and its place
freed (a browser's EventSource reconnects, and resumes from the last id it had).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import AsyncGenerator

import anyio
from anyio.lowlevel import RunVar
from starlette.responses import PlainTextResponse, Response
from starlette.types import Receive, Scope, Send

__all__ = ["MAX_LIVE", "QUEUE", "STALL_S", "LiveClients", "quiet_drops"]

# Live streams at once (`ssetape web --max-live`): a browser opens one per page that follows
# a recording, and each polls the store every second.
MAX_LIVE = 100
# Messages a client may be behind by: a message is a row of the list or an event (a few KB),
# or the parts of an exchange's page that changed (at most its bodies' cut, 1 MiB each).
QUEUE = 64
# How long a full queue waits for the connection to take something before the client is
# dropped: a slow link gets this long for a big message.
STALL_S = 5.0
# Seconds a client turned away is told to wait.
RETRY_AFTER_S = 10
# Threads the live streams poll the store on at most (all of them together): the page
# threads (anyio's 40) stay free for pages however many streams are open.
POLL_THREADS = 4
_poll_threads: RunVar[anyio.CapacityLimiter] = RunVar("ssetape_live_poll_threads")
# Set in the task of a request whose client was dropped: uvicorn logs a response left
# incomplete as an error, which it is not here.
_dropping = contextvars.ContextVar("ssetape_live_dropping", default=False)
_UNFINISHED = "ASGI callable returned without completing response."


def poll_threads() -> anyio.CapacityLimiter:
    """The threads the live streams of this event loop poll the store on."""
    try:
        return _poll_threads.get()
    except LookupError:
        limiter = anyio.CapacityLimiter(POLL_THREADS)
        _poll_threads.set(limiter)
        return limiter


class _NotDropped(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.msg == _UNFINISHED and _dropping.get())


_QUIET = _NotDropped()


def quiet_drops() -> None:
    """Keep uvicorn from logging a dropped live client as an error (idempotent)."""
    logging.getLogger("uvicorn.error").addFilter(_QUIET)


class LiveClients:
    """The live streams of one viewer: how many are open, and the response of a new one."""

    def __init__(
        self, limit: int = MAX_LIVE, *, queue: int = QUEUE, stall_s: float = STALL_S
    ) -> None:
        self.limit, self.queue, self.stall_s = limit, queue, stall_s
        self.open = 0  # touched on the event loop only
        self.dropped = 0

    def full(self) -> bool:
        return self.open >= self.limit

    def refused(self) -> Response:
        return PlainTextResponse(
            f"ssetape web: {self.limit} live streams are open already (--max-live); "
            "the page still loads, try its live view again later",
            status_code=503,
            headers={"retry-after": str(RETRY_AFTER_S), "cache-control": "no-store"},
        )

    def respond(self, stream: AsyncGenerator[bytes, None]) -> Response:
        """The Server-Sent Events response of ``stream``, or 503 past the limit."""
        if self.full():
            return self.refused()
        self.open += 1  # given back when the response ends, however it ends
        return _LiveResponse(self, stream)


class _LiveResponse(Response):
    media_type = "text/event-stream"

    def __init__(self, clients: LiveClients, stream: AsyncGenerator[bytes, None]) -> None:
        self.clients, self.stream = clients, stream
        self.status_code = 200
        self.background = None
        self.init_headers({"cache-control": "no-store"})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self._serve(receive, send)
        finally:
            self.clients.open -= 1

    async def _serve(self, receive: Receive, send: Send) -> None:
        clients = self.clients
        put, take = anyio.create_memory_object_stream[bytes](clients.queue)
        dropped = False
        async with anyio.create_task_group() as tg:

            async def produce() -> None:
                nonlocal dropped
                async with put, contextlib.aclosing(self.stream) as stream:
                    async for message in stream:
                        with anyio.move_on_after(clients.stall_s):
                            await put.send(message)
                            continue
                        # The queue stayed full: the client reads nothing. Dropped.
                        dropped = True
                        tg.cancel_scope.cancel()
                        return

            async def gone() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                tg.cancel_scope.cancel()

            tg.start_soon(produce)
            tg.start_soon(gone)
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            async with take:
                async for message in take:
                    await send({"type": "http.response.body", "body": message, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            tg.cancel_scope.cancel()
        if dropped:
            clients.dropped += 1
            _dropping.set(True)  # returned unfinished: not an error (see quiet_drops)
            _abort(receive)


def _abort(receive: Receive) -> None:
    """Close the connection now, what it has not sent discarded. Returning unfinished makes
    uvicorn close it too, but asyncio closes a connection once its buffer is sent: never, to
    a client that reads nothing. (uvicorn's ``receive`` is a method of the request's cycle,
    which holds the connection; under another server the connection is left to it.)"""
    transport = getattr(getattr(receive, "__self__", None), "transport", None)
    if isinstance(transport, asyncio.Transport):
        transport.abort()
