"""The pytest plugin's replay server: a cassette served in-process, without mitmproxy.

Reverse mode (a test's ``base_url``) binds one upstream per server. Forward mode (a test's
``proxy_url``) puts a mitmproxy child in front that re-targets every request here and names
the original host and request time in headers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from ssetape.replay_front import INLINE_BODY, ReplayFront
from ssetape.replay_index import ReplayIndex
from ssetape.storage.store import Store
from ssetape.timed_server import error_response

log = logging.getLogger("ssetape.cassette_front")
H_HOST, H_T0 = b"x-ssetape-host", b"x-ssetape-t0"


class CassetteFront(ReplayFront):
    def __init__(self, store: Store, index: ReplayIndex, upstream: str, speed: float) -> None:
        super().__init__(store, index, upstream, speed)
        self.server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open.add(writer)
        try:
            await super().handle(reader, writer)
        finally:
            self._open.discard(writer)

    async def respond(
        self,
        writer: asyncio.StreamWriter,
        request_line: list[bytes],
        headers: dict[bytes, bytes],
        body: bytes,
    ) -> bool:
        t0 = time.time()  # offset zero: the whole request is here
        if len(request_line) < 2:
            error_response(writer, 400, "ssetape: malformed request line")
            return False
        host = self.host
        if not host:  # behind the forwarding proxy: it measured t0 and knows the host
            host = headers.get(H_HOST, b"").decode("latin-1")
            with contextlib.suppress(ValueError):
                t0 = float(headers.get(H_T0, b"") or t0)
        method = request_line[0].decode("latin-1")
        target = request_line[1].decode("latin-1")
        try:
            found = (
                self.index.lookup(method, host, target, body or None, may_query=False)
                if len(body) <= INLINE_BODY
                else None
            )
            if found is None:
                found = await asyncio.get_running_loop().run_in_executor(
                    None, self.index.lookup, method, host, target, body or None
                )
        except Exception as e:
            log.exception("ssetape: replay lookup failed")
            error_response(writer, 500, f"ssetape could not look this request up: {e}")
            return True
        if isinstance(found, int):
            self.hits += 1
            return await self.play_recording(writer, request_line[0], found, t0, self.speed)
        self.misses += 1
        assert found is not None
        error_response(writer, 404, found.body(), "application/json", b"x-ssetape-miss: 1\r\n")
        return True

    async def start(self, host: str = "127.0.0.1") -> int:
        self.server = await asyncio.start_server(self.handle, host, 0, backlog=4096)
        port: int = self.server.sockets[0].getsockname()[1]
        return port

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            # Streams still playing end with the test, as a real server going away would.
            for writer in list(self._open):
                writer.transport.abort()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.server.wait_closed(), 2)
