"""The simulated upstream API: an asyncio HTTP/1.1 server that serves :func:`plan`.

Every planned chunk is written as one HTTP chunk at its absolute deadline (measured
from the moment the whole request arrived), so delays never add up; the response
headers go out together with the first chunk. Keep-alive is supported; a ``cut``
plan closes the connection in the middle of the body. Nothing of HTTP is recorded.

An ``Upgrade: websocket`` request on a WebSocket endpoint (OpenAI Realtime, the Responses
API's WebSocket mode, Gemini Live: :mod:`ssetape.simulator.ws_upgrade`) gets its 101 on the
same port, and h11 hands the connection over to the session. With ``keep_sessions``, every
session is kept in :attr:`Simulator.sessions` with the frames it sent and received.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from ssl import SSLContext
from urllib.parse import urlsplit

import h11
import orjson

from ssetape.simulator.routes import plan
from ssetape.simulator.scenario import Plan
from ssetape.simulator.ws_realtime import RealtimePlan
from ssetape.simulator.ws_upgrade import Upgrade, ws_api
from ssetape.simulator.ws_wire import Session

_MAX_BODY = 64 * 1024 * 1024
_ANY_ADDRESS = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}


@dataclass(frozen=True, slots=True)
class _Request:
    method: str
    target: str
    headers: dict[str, str]  # lower-case names
    body: bytes
    raw_headers: list[tuple[bytes, bytes]]  # as the client spelt them

    def upgrade(self) -> Upgrade | None:
        """The WebSocket session it asks for on an endpoint that has one, or None."""
        if self.method != "GET" or "websocket" not in self.headers.get("upgrade", "").lower():
            return None
        api = ws_api(self.target)
        return None if api is None else Upgrade(api, self.target, self.raw_headers)


class Simulator:
    """Serves the scenarios of :mod:`ssetape.simulator.scenario` over HTTP/1.1."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        speed: float = 1.0,
        *,
        verbose: bool = False,
        ssl: SSLContext | None = None,
        realtime: RealtimePlan | None = None,
        keep_sessions: bool = False,
    ) -> None:
        if not speed > 0:
            raise ValueError(f"speed must be positive, got {speed!r}")
        self.host = host
        self.speed = speed
        self.verbose = verbose
        self.ssl = ssl
        self._requested_port = port
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        # How each Realtime response goes (a bench times its own).
        self.realtime = realtime or RealtimePlan()
        # The WebSocket sessions with their frames, for tests; off, a long run keeps none.
        self.sessions: list[Session] = []
        self._keep_sessions = keep_sessions
        self._ids = itertools.count(1)  # WebSocket sessions' ids, never the same twice

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the simulator is not started")
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def url(self) -> str:
        """Where clients reach it (loopback when it listens on every address)."""
        host = _ANY_ADDRESS.get(self.host, self.host)
        scheme = "https" if self.ssl else "http"
        return f"{scheme}://{f'[{host}]' if ':' in host else host}:{self.port}"

    async def start(self) -> None:
        """Bind the port; serving starts at once on the running loop."""
        if self._server is None:
            self._server = await asyncio.start_server(
                self._connection, self.host, self._requested_port, ssl=self.ssl
            )

    async def serve_forever(self) -> None:
        await self.start()  # serving from here on
        try:
            # Not Server.serve_forever(): on Python 3.12+ its cancellation waits for every
            # client connection to close before stop() could close the keep-alive ones.
            await asyncio.Event().wait()
        finally:
            await self.stop()

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        # Open keep-alive connections would otherwise outlive the server.
        tasks = [t for t in self._tasks if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if server is not None:
            await server.wait_closed()

    @contextlib.contextmanager
    def serve_in_thread(self) -> Iterator[Simulator]:
        """Run on a private event loop in a daemon thread; yields once the port is bound."""
        loop = asyncio.new_event_loop()
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.start())
            except BaseException as exc:  # handed to the caller's thread below
                failure.append(exc)
            ready.set()
            try:
                if not failure:
                    loop.run_forever()
                    loop.run_until_complete(self.stop())
            finally:
                loop.close()

        thread = threading.Thread(target=run, name="ssetape-simulator", daemon=True)
        thread.start()
        ready.wait()
        if failure:
            thread.join()
            raise failure[0]
        try:
            yield self
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        sock = writer.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            # Each event has to leave at once, not wait for Nagle to batch it.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = h11.Connection(h11.SERVER)
        try:
            while (request := await self._read_request(conn, reader)) is not None:
                if (upgrade := request.upgrade()) is not None:
                    await upgrade.serve(
                        reader, writer, conn.trailing_data[0], speed=self.speed, ids=self._ids,
                        realtime=self.realtime, verbose=self.verbose,
                        sessions=self.sessions if self._keep_sessions else None,
                    )  # fmt: skip
                    break  # the connection was the session's
                received = asyncio.get_running_loop().time()
                served = plan(
                    request.method, request.target, request.headers, request.body, speed=self.speed
                )
                complete = await self._send(conn, writer, request, served, received)
                self._log(request, served, complete)
                if not complete or conn.our_state is not h11.DONE:
                    break
                if conn.their_state is not h11.DONE:
                    break
                conn.start_next_cycle()
        except (ConnectionError, h11.ProtocolError):
            pass  # the client went away or spoke broken HTTP: nothing left to answer
        except asyncio.CancelledError:
            # stop() cancels open connections; ending normally keeps Python 3.11's
            # start_server callback from reporting the cancellation as an error.
            pass
        finally:
            self._tasks.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    @staticmethod
    async def _read_request(conn: h11.Connection, reader: asyncio.StreamReader) -> _Request | None:
        head: h11.Request | None = None
        body = bytearray()
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await reader.read(65536))
            elif isinstance(event, h11.Request):
                head = event
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > _MAX_BODY:
                    raise ConnectionError("request body too large")
            elif isinstance(event, h11.EndOfMessage) and head is not None:
                headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in head.headers}
                target = head.target.decode("latin-1")
                if "://" in target:  # absolute-form, as clients send to a proxy
                    parts = urlsplit(target)
                    target = parts.path + (f"?{parts.query}" if parts.query else "")
                method = head.method.decode("ascii")
                raw = list(head.headers.raw_items())
                return _Request(method, target or "/", headers, bytes(body), raw)
            else:  # ConnectionClosed: the client is done
                return None

    @staticmethod
    async def _send(
        conn: h11.Connection,
        writer: asyncio.StreamWriter,
        request: _Request,
        served: Plan,
        received: float,
    ) -> bool:
        """Write the response on schedule; False when the connection has to close."""
        loop = asyncio.get_running_loop()
        headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in served.headers]
        headers.append((b"server", b"ssetape-simulator"))
        pending = conn.send(h11.Response(status_code=served.status, headers=headers)) or b""
        # A HEAD response has the headers of the answer but no body.
        chunks = [] if request.method == "HEAD" else served.chunks
        for chunk in chunks:
            delay = received + chunk.at - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            writer.write(pending + (conn.send(h11.Data(data=chunk.data)) or b""))
            pending = b""
            await writer.drain()
        if served.cut and chunks:
            await writer.drain()
            return False
        writer.write(pending + (conn.send(h11.EndOfMessage()) or b""))
        await writer.drain()
        return True

    def _log(self, request: _Request, served: Plan, complete: bool) -> None:
        if not self.verbose:
            return
        try:
            model = orjson.loads(request.body).get("model")
        except (ValueError, AttributeError):
            model = None
        kind = "stream" if served.stream else "json"
        end = "cut" if served.cut else "ok" if complete else "closed"
        last = served.chunks[-1].at if served.chunks else 0.0
        print(
            f"{request.method} {request.target} model={model} -> {served.status} {kind}, "
            f"{len(served.chunks)} chunks over {last:.3f}s, {end}",
            file=sys.stderr,
            flush=True,
        )
