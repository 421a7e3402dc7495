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
- ``ssetape_max_resets``: a connection that resets more of its streams (RST_STREAM) than
  this within a second is closed. An HTTP/2 "rapid reset" client (HEADERS then RST_STREAM
  on new stream ids, thousands a second: resets free the slots that the concurrent-stream
  limit counts) otherwise keeps the proxy's one event loop busy while every other client
  waits. The requests it had already sent are killed as their heads are read: none
  reaches the upstream or the store.
- ``ssetape_max_streams``: requests in flight on one connection. HTTP/2 lets a client have
  100 streams open; mitmproxy 11 keeps a request that its client reset after sending it
  whole in flight until the connection ends, so a rapid reset of whole requests piles
  them up (each dialled upstream and recorded) faster than resets are seen. Past the bound
  the connection is closed; counted as the proxy reads the requests, not by the clock, it
  holds however busy the proxy is.

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

WINDOW = 1.0  # seconds over which a connection's resets are counted
RESET_BY_CLIENT = "stream reset by client"  # mitmproxy's error for a client's RST_STREAM
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
        self._fields: dict[str, str] = {}  # those of the latest hit, for the count's line
        self.pending = 0  # hits not yet reported
        self.total = 0

    def hit(self, now: float | None = None, **fields: str) -> None:
        """``fields`` fill the lines' ``{name}`` slots: the first hit's, or the latest's."""
        now = time.monotonic() if now is None else now
        self.total += 1
        self._fields = fields
        if now - self._last >= self._quiet and self.pending == 0:
            log.warning(self._first.format(**fields))
            self._last = now
        else:
            self.pending += 1
            self.flush(now)

    def flush(self, now: float | None = None) -> None:
        """Report what was held back, once ``quiet`` seconds passed since the last line."""
        now = time.monotonic() if now is None else now
        if self.pending and now - self._last >= self._quiet:
            log.warning(self._more.format(n=self.pending, **self._fields))
            self.pending, self._last = 0, now


class ConnectionGuard:
    """Tracks every client connection; closes those that wait too long without a request
    and, at the cap, the one that has waited longest."""

    def __init__(self) -> None:
        self.timeout = 60.0
        self.max_connections = 0
        self.max_streams = 1000
        self.max_resets = 200
        self._started: dict[str, set[str]] = {}  # client id -> its requests not ended yet
        self._resets: dict[str, tuple[float, int]] = {}  # client id -> (window start, resets)
        self._overrun: set[str] = set()  # client ids past a stream bound: kill the rest
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
        self.too_many_streams = LogBurst(
            "ssetape: closing client connections with more than ssetape_max_streams requests "
            "in flight (HTTP/2 streams sent and reset)",
            "ssetape: {n} more client connections closed for too many requests in flight",
        )
        self.too_many_resets = LogBurst(
            "ssetape: closing client connections that reset more than ssetape_max_resets "
            "streams a second (an HTTP/2 rapid reset)",
            "ssetape: {n} more client connections closed for resetting too many streams",
        )
        self.bursts = (
            self.closed_idle,
            self.evicted,
            self.refused,
            self.out_of_fds,
            self.too_many_streams,
            self.too_many_resets,
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
        loader.add_option(
            "ssetape_max_streams",
            int,
            1000,
            "Requests (HTTP/2 streams) in flight on one client connection; past it the "
            "connection is closed. 0: no bound.",
        )
        loader.add_option(
            "ssetape_max_resets",
            int,
            200,
            "Streams one client connection may reset (RST_STREAM) in a second; past it the "
            "connection is closed (an HTTP/2 rapid reset). 0: no bound.",
        )

    def configure(self, updated: set[str]) -> None:
        if "ssetape_header_timeout" in updated:
            self.timeout = seconds(
                "ssetape_header_timeout", ctx.options.ssetape_header_timeout, 1, 86400
            )
        if "ssetape_max_connections" in updated:
            cap = at_least("ssetape_max_connections", ctx.options.ssetape_max_connections, 0)
            self.max_connections = cap or auto_max_connections()
        if "ssetape_max_streams" in updated:
            self.max_streams = at_least("ssetape_max_streams", ctx.options.ssetape_max_streams, 0)
        if "ssetape_max_resets" in updated:
            self.max_resets = at_least("ssetape_max_resets", ctx.options.ssetape_max_resets, 0)

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
        for burst in self.bursts:
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
        self._overrun.discard(client.id)

    def _forget(self, cid: str) -> None:
        self._clients.pop(cid, None)
        self._idle.pop(cid, None)
        self._flows.pop(cid, None)
        self._tunnels.discard(cid)
        self._resets.pop(cid, None)
        self._started.pop(cid, None)

    # -- requests --------------------------------------------------------------------

    def http_connect(self, flow: http.HTTPFlow) -> None:
        # A tunnel is set up: what it carries must start in time, counted from now.
        self._waiting(flow.client_conn.id)

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        cid = flow.client_conn.id
        if cid in self._clients and self.max_streams and cid not in self._overrun:
            started = self._started.setdefault(cid, set())
            started.add(flow.id)
            if len(started) > self.max_streams:
                self._overrun_by(cid, self.too_many_streams)
        if cid in self._overrun and flow.killable:
            # Read before its connection closed (mitmproxy runs the hooks of one connection's
            # streams side by side): it goes no further, neither upstream nor to the store.
            flow.kill()

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
        reset = flow.error is not None and flow.error.msg.startswith(RESET_BY_CLIENT)
        cid = flow.client_conn.id
        if not reset or not self.max_resets or cid not in self._clients:
            return
        now = time.monotonic()
        since, n = self._resets.get(cid, (now, 0))
        if now - since >= WINDOW:
            since, n = now, 0
        self._resets[cid] = (since, n + 1)
        if n + 1 > self.max_resets:
            self._overrun_by(cid, self.too_many_resets)

    def _overrun_by(self, cid: str, burst: LogBurst) -> None:
        self._overrun.add(cid)  # the requests already read are killed as they come
        self._close(cid)
        burst.hit()

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
        self._started.get(cid, set()).discard(flow.id)
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
        for burst in self.bursts:
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
