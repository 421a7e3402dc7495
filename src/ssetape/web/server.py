"""Serving the viewer with uvicorn: bound before it is announced, stopped by a signal.

The socket is bound here (port 0 picks a free one), so the address printed is the one that
answers; ``listening on http://HOST:PORT`` is printed once uvicorn has started on it.
:class:`Beside` serves it on a thread of its own beside a proxy (``--web`` of `ssetape
record`, `replay` and `run`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator

import uvicorn

from ssetape.storage.queries import Queries
from ssetape.storage.store import Store, StoreError
from ssetape.web.app import LOOPBACK_NAMES, create_app
from ssetape.web.live_clients import MAX_LIVE, LiveClients, quiet_drops
from ssetape.web.waiting_store import WaitingStore

__all__ = ["Beside", "WebServer", "bind"]

# Open live streams are cut after this at a stop, rather than held until the browser leaves.
_STOP_GRACE_S = 1
# How long a stop waits for the viewer beside a proxy: the grace above, plus a page that is
# being rendered (its thread is a daemon: past this, it does not hold the process).
_JOIN_S = 5 * _STOP_GRACE_S + 5


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (0: a free port); OSError if it cannot be had."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


class _Uvicorn(uvicorn.Server):
    """uvicorn without its own signal handling: it re-raises a caught SIGTERM after its
    shutdown, so the command would die of it instead of exiting 0 (see WebServer.serve)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class WebServer:
    """The viewer of one store (or of one a recorder is to create) on one address."""

    def __init__(
        self, store: Store | WaitingStore, host: str, port: int, sock: socket.socket | None = None,
        *, max_live: int = MAX_LIVE,
    ) -> None:  # fmt: skip
        self.store = store
        self.sock = sock if sock is not None else bind(host, port)
        bound = self.sock.getsockname()
        self.host, self.port = host, int(bound[1])
        self.live = LiveClients(max_live)
        quiet_drops()
        config = uvicorn.Config(
            create_app(
                Queries(store) if isinstance(store, Store) else store,
                hosts=_hosts(host),
                live_clients=self.live,
            ),
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
        asyncio.run(self.serve(ready))

    async def serve(self, ready: Callable[[str], None], *, signals: bool = True) -> None:
        """Serve on the running loop until stopped; by SIGINT/SIGTERM too with ``signals``
        (the main thread's loop only)."""
        loop = asyncio.get_running_loop()
        if signals:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, self.stop)
        task = asyncio.create_task(self.server.serve(sockets=[self.sock]))
        while not self.server.started and not task.done():
            await asyncio.sleep(0.02)
        if self.server.started:
            ready(self.url)
        await task

    def stop(self) -> None:
        """Stop serving (thread-safe: a flag uvicorn polls)."""
        # A second signal stops at once, live streams or not.
        self.server.force_exit = self.server.should_exit
        self.server.should_exit = True


class Beside:
    """The viewer beside a proxy, in the same process: on a thread with its own event loop,
    so no page rendered or stream polled ever runs on the proxy's loop.

    The port is bound at once (a port in use is the command's one-line error before the proxy
    starts); the store is opened and the viewer announced by :meth:`start`, called once the
    proxy listens (its recorder has created and migrated the store by then). The proxy's
    signals stop the proxy; the command then calls :meth:`stop`."""

    def __init__(self, db: str, host: str, port: int, announce: Callable[[str], None]) -> None:
        self.db, self.host, self.announce = db, host, announce
        self.sock = bind(host, port)
        self.url = ""  # once it serves
        # Set once it serves or has given up: a caller may wait for the one or the other.
        self.settled = threading.Event()
        self.server: WebServer | None = None
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._main, name="ssetape-web", daemon=True)

    def start(self) -> None:
        """Serve from now on: returns at once (it is called on the proxy's loop)."""
        if not self._thread.is_alive() and not self._stopping.is_set():
            self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self.server is not None:
            self.server.stop()
        if self._thread.is_alive():
            self._thread.join(_JOIN_S)
        self.sock.close()

    def _main(self) -> None:
        try:
            store = Store.open(self.db, create=False)
        except StoreError as e:
            # The proxy goes on: a viewer that cannot read is no reason to cut live traffic.
            print(f"ssetape web: not started: {e}", file=sys.stderr, flush=True)
            self.settled.set()
            return
        try:
            self.server = WebServer(store, self.host, 0, sock=self.sock)
            if not self._stopping.is_set():  # a stop that came first would not be seen
                asyncio.run(self.server.serve(self._ready, signals=False))
        except Exception as e:  # the proxy goes on, as above; said once
            print(f"ssetape web: stopped: {e!r}", file=sys.stderr, flush=True)
        finally:
            self.settled.set()
            store.close()

    def _ready(self, url: str) -> None:
        self.url = url
        self.announce(url)
        self.settled.set()


def _hosts(host: str) -> list[str] | None:
    """The Host names the viewer answers: loopback's when it listens on loopback (a site
    rebinding its name to 127.0.0.1 is refused), any when told to listen beyond it."""
    try:
        loopback = ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        loopback = host == "localhost"
    return [*LOOPBACK_NAMES, host] if loopback else None
