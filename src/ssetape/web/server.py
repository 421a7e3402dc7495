"""Serving the viewer with uvicorn: bound before it is announced, stopped by a signal.

The socket is bound here (port 0 picks a free one), so the address printed is the one that
answers; ``listening on http://HOST:PORT`` is printed once uvicorn has started on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
from collections.abc import Callable, Iterator

import uvicorn

from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from ssetape.web.app import create_app

__all__ = ["WebServer"]

# Open live streams are cut after this at a stop, rather than held until the browser leaves.
_STOP_GRACE_S = 1


class _Uvicorn(uvicorn.Server):
    """uvicorn without its own signal handling: it re-raises a caught SIGTERM after its
    shutdown, so the command would die of it instead of exiting 0 (see WebServer._serve)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class WebServer:
    """The viewer of one store on one address."""

    def __init__(self, store: Store, host: str, port: int) -> None:
        self.store = store
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.sock.listen(128)
        bound = self.sock.getsockname()
        self.host, self.port = host, int(bound[1])
        config = uvicorn.Config(
            create_app(Queries(store)),
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=_STOP_GRACE_S,
            lifespan="off",
        )
        self.server = _Uvicorn(config)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def run(self, ready: Callable[[str], None]) -> None:
        """Serve until SIGINT or SIGTERM; ``ready(url)`` once requests are answered."""
        asyncio.run(self._serve(ready))

    async def _serve(self, ready: Callable[[str], None]) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._stop)
        task = asyncio.create_task(self.server.serve(sockets=[self.sock]))
        while not self.server.started and not task.done():
            await asyncio.sleep(0.02)
        if self.server.started:
            ready(self.url)
        await task

    def _stop(self) -> None:
        # A second signal stops at once, live streams or not.
        self.server.force_exit = self.server.should_exit
        self.server.should_exit = True
