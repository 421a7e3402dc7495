"""Client connections the proxy keeps: how many, and for how long without a request.

A slowloris client opens connections and sends their request heads a byte at a time (or
never); each holds a file descriptor, and with the usual limit of 1,024 a few hundred of them
make the proxy refuse everyone (asyncio then logs a traceback per refused accept). Two bounds
keep the proxy serving:

- ``ssetape_header_timeout``: a connection with no request in flight for this long (one
  that never completes a head or a body, or an idle keep-alive one) is closed. A request is
  in flight once the proxy has it whole, head and body: a client that sends its head and
  then trickles its body a byte at a time waits like one that trickles its head. Tunnels
  that carry no requests (WebSocket, raw TCP) are exempt.
- ``ssetape_max_connections``: at the cap, a new client closes the connection that has been
  waiting longest without a request in flight; only when every connection is busy is the
  new one refused. The default fits the descriptor limit: a client and its upstream take
  two each.

What the bounds do is logged once per burst with counts, never once per connection, and so
is a refused accept when descriptors run out anyway.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import resource
import time
from collections import OrderedDict
from typing import Any

from mitmproxy import connection, ctx, http, tcp, udp
from mitmproxy.addonmanager import Loader

from ssetape.addons.options import at_least, seconds

__all__ = ["ConnectionGuard", "LogBurst", "auto_max_connections"]

log = logging.getLogger("ssetape.guard")

RESERVED_FDS = 128  # the store, the recording process's pipes, certificates, logs
BURST_QUIET = 10.0  # seconds between two lines about the same kind of trouble
_OUT_OF_FDS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


def auto_max_connections() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 16
    return max(16, (soft - RESERVED_FDS) // 2)


class LogBurst:
    """One warning when a kind of trouble starts, then a count at most every ``quiet``
    seconds while it goes on: a flood of the same event is a few lines, not thousands."""

    def __init__(self, first: str, more: str, quiet: float = BURST_QUIET) -> None:
        self._first, self._more, self._quiet = first, more, quiet
        self._last = -float("inf")
        self.pending = 0  # hits not yet reported
        self.total = 0

    def hit(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        self.total += 1
        if now - self._last >= self._quiet and self.pending == 0:
            log.warning(self._first)
            self._last = now
        else:
            self.pending += 1
            self.flush(now)

    def flush(self, now: float | None = None) -> None:
        """Report what was held back, once ``quiet`` seconds passed since the last line."""
        now = time.monotonic() if now is None else now
        if self.pending and now - self._last >= self._quiet:
            log.warning(self._more.format(n=self.pending))
            self.pending, self._last = 0, now


class ConnectionGuard:
    """Tracks every client connection; closes those that wait too long without a request
    and, at the cap, the one that has waited longest."""

    def __init__(self) -> None:
        self.timeout = 60.0
        self.max_connections = 0
        self._clients: dict[str, connection.Client] = {}
        self._idle: OrderedDict[str, float] = OrderedDict()  # client id -> idle since
        # client id -> ids of its requests in flight (read whole, not answered yet)
        self._flows: dict[str, set[str]] = {}
        self._tunnels: set[str] = set()  # client ids that carry no more requests
        self._sweeper: asyncio.Task[None] | None = None
        self._closing: set[asyncio.Task[None]] = set()
        self.closed_idle = LogBurst(
            "ssetape: closing client connections that sent no request within "
            "ssetape_header_timeout (a slow or stalled client)",
            "ssetape: {n} more client connections closed for sending no request in time",
        )
        self.evicted = LogBurst(
            "ssetape: at ssetape_max_connections: new clients close the connection that has "
            "waited longest without a request",
            "ssetape: {n} more waiting connections closed to let new clients in",
        )
        self.refused = LogBurst(
            "ssetape: at ssetape_max_connections with every connection busy: new clients are "
            "refused until one ends",
            "ssetape: {n} more clients refused at ssetape_max_connections",
        )
        self.out_of_fds = LogBurst(
            "ssetape: out of file descriptors: new connections cannot be accepted (raise "
            "`ulimit -n` or lower ssetape_max_connections)",
            "ssetape: {n} more connections could not be accepted for want of descriptors",
        )

    def load(self, loader: Loader) -> None:
        loader.add_option(
            "ssetape_header_timeout",
            str,
            "60",
            "Seconds a client connection may go without a request in flight (sending a whole "
            "request, head and body, or idle between requests) before it is closed.",
        )
        loader.add_option(
            "ssetape_max_connections",
            int,
            0,
            "Client connections open at once; at the cap a new client closes the one that has "
            "waited longest without a request. 0: fit the descriptor limit (ulimit -n).",
        )

    def configure(self, updated: set[str]) -> None:
        if "ssetape_header_timeout" in updated:
            self.timeout = seconds(
                "ssetape_header_timeout", ctx.options.ssetape_header_timeout, 1, 86400
            )
        if "ssetape_max_connections" in updated:
            cap = at_least("ssetape_max_connections", ctx.options.ssetape_max_connections, 0)
            self.max_connections = cap or auto_max_connections()

    def running(self) -> None:
        loop = asyncio.get_running_loop()
        self._sweeper = loop.create_task(self._sweep())
        previous = loop.get_exception_handler()

        def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
            exc = context.get("exception")
            if isinstance(exc, OSError) and exc.errno in _OUT_OF_FDS:
                self.out_of_fds.hit()  # asyncio retries the accept itself a second later
            elif previous is not None:
                previous(loop, context)
            else:
                loop.default_exception_handler(context)

        loop.set_exception_handler(handler)

    def done(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        for burst in (self.closed_idle, self.evicted, self.refused, self.out_of_fds):
            burst.flush(float("inf"))  # what the last quiet period held back

    # -- connections -----------------------------------------------------------------

    def client_connected(self, client: connection.Client) -> None:
        if len(self._clients) >= self.max_connections:
            if self._idle:
                oldest = next(iter(self._idle))
                self._close(oldest)
                self.evicted.hit()
            else:
                client.error = "ssetape: too many client connections (ssetape_max_connections)"
                self.refused.hit()
                return
        self._clients[client.id] = client
        self._idle[client.id] = time.monotonic()

    def client_disconnected(self, client: connection.Client) -> None:
        self._forget(client.id)

    def _forget(self, cid: str) -> None:
        self._clients.pop(cid, None)
        self._idle.pop(cid, None)
        self._flows.pop(cid, None)
        self._tunnels.discard(cid)

    # -- requests --------------------------------------------------------------------

    def http_connect(self, flow: http.HTTPFlow) -> None:
        # A tunnel is set up: what it carries must start in time, counted from now.
        self._waiting(flow.client_conn.id)

    def request(self, flow: http.HTTPFlow) -> None:
        # Not at the head: a body that trickles in (or never comes) is still waiting, under
        # the same deadline as a head, and evictable at the cap.
        if flow.response is not None or flow.error is not None:
            return  # answered before its body ended (a streamed upload refused): already over
        cid = flow.client_conn.id
        if cid in self._clients:
            self._flows.setdefault(cid, set()).add(flow.id)
            self._idle.pop(cid, None)

    def response(self, flow: http.HTTPFlow) -> None:
        if flow.websocket is not None:
            self._tunnel(flow)
        self._ended(flow)

    def error(self, flow: http.HTTPFlow) -> None:
        self._ended(flow)

    def websocket_start(self, flow: http.HTTPFlow) -> None:
        self._tunnel(flow)

    def tcp_start(self, flow: tcp.TCPFlow) -> None:
        self._tunnel(flow)

    def udp_start(self, flow: udp.UDPFlow) -> None:
        self._tunnel(flow)

    def _tunnel(self, flow: http.HTTPFlow | tcp.TCPFlow | udp.UDPFlow) -> None:
        cid = flow.client_conn.id
        if cid in self._clients:
            self._tunnels.add(cid)
            self._idle.pop(cid, None)

    def _ended(self, flow: http.HTTPFlow) -> None:
        cid = flow.client_conn.id
        flows = self._flows.get(cid)
        if flows is not None:
            flows.discard(flow.id)
            if not flows:
                self._waiting(cid)

    def _waiting(self, cid: str) -> None:
        if cid in self._clients and cid not in self._tunnels and not self._flows.get(cid):
            self._idle[cid] = time.monotonic()
            self._idle.move_to_end(cid)

    # -- closing ---------------------------------------------------------------------

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(min(1.0, self.timeout / 4))
            self.expire(time.monotonic())

    def expire(self, now: float) -> int:
        """Close every connection idle past the timeout; returns how many."""
        closed = 0
        while self._idle:
            cid, since = next(iter(self._idle.items()))
            if now - since < self.timeout:
                break
            self._close(cid)
            self.closed_idle.hit(now)
            closed += 1
        for burst in (self.closed_idle, self.evicted, self.refused, self.out_of_fds):
            burst.flush(now)
        return closed

    def _close(self, cid: str) -> None:
        self._forget(cid)
        server = ctx.master.addons.get("proxyserver")
        handler = server.connections.get(cid) if server is not None else None
        if handler is not None:
            # The proxy's own idle-timeout path: cancels the connection's handler, which
            # closes the client and whatever upstream it had.
            task = asyncio.get_running_loop().create_task(handler.on_timeout())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)


addons = [ConnectionGuard()]
