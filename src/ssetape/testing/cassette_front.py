"""The pytest plugin's replay server: a cassette served in-process, without mitmproxy.

Reverse mode (a test's ``base_url``) binds one upstream per server. Forward mode (a test's
``proxy_url``) puts a mitmproxy child in front that re-targets every request here and names
the original host and request time in headers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from ssetape.replay.direct_front import ReplayFront
from ssetape.replay.request_index import ReplayIndex
from ssetape.storage.store import Store

log = logging.getLogger("ssetape.testing.cassette_front")
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

    def origin(self, headers: dict[bytes, bytes], t0: float) -> tuple[str, float]:
        if self.host:
            return self.host, t0
        # Behind the forwarding proxy: it measured t0 and knows the host.
        host = headers.get(H_HOST, b"").decode("latin-1")
        with contextlib.suppress(ValueError):
            t0 = float(headers.get(H_T0, b"") or t0)
        return host, t0

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
