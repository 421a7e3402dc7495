"""A stop that cuts no stream: the first SIGTERM or SIGINT drains, a second stops at once.

Draining, the proxy closes its listening sockets (a load balancer's next connection is
refused, and goes to another recorder), says "draining" on ``/readyz`` (503; ``/healthz``
stays 200), and lets the exchanges in flight finish, recorded whole (a WebSocket session is
in flight until it closes). An HTTP/1 response that begins meanwhile carries ``Connection:
close`` (a 101 excepted), and the connection closes after it; a connection idle between two
requests is closed (as nginx and Go's ``Shutdown`` do). Once
nothing is in flight, or at ``ssetape_drain_timeout`` seconds (30; 0 stops at once, as
before), the proxy stops: what is still in flight then is stored ``interrupted``, and the
exit line says how many exchanges drained and how many were interrupted.

mitmproxy facts this rests on (11 to 13): the proxyserver addon's ``servers.update([])``
stops every server instance, which closes the listening sockets only (``asyncio.Server.
close``: the connections it accepted stay); its ``connections`` maps a client's id to the
handler of that connection, whose client transport task ends the connection when cancelled
(as when the client goes away); an HTTP/1 server connection closes after a response whose
headers say ``Connection: close``, read when the response ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import select
import signal
import time
from collections.abc import Coroutine
from typing import Any

from mitmproxy import connection, ctx, http
from mitmproxy.addonmanager import Loader

from ssetape.addons.options import seconds
from ssetape.addons.recorder import META, SESSION_META, Recorder
from ssetape.recording.exit_line import drain_note

__all__ = ["DEADLINE", "Drain", "settled"]

log = logging.getLogger("ssetape.drain")

SWEEP = 0.1  # seconds between two looks at the connections while draining
CLOSE_WAIT = 2.0  # seconds the connections closed at the end may take to go
# A connection that has not sent a whole request head yet is idle only once it is this old
# (seconds; Go's Shutdown waits 5 s too): its first request may be in the socket, unread.
NEW_IDLE = 5.0
SIGNALS = (signal.SIGTERM, signal.SIGINT)
QUIET_TURNS = 3  # turns of the loop with no connection queued before the listeners close
DEADLINE = "the drain deadline ({:g} s) passed before the exchange ended"


class Drain:
    def __init__(self, recorder: Recorder | None = None) -> None:
        self.recorder = recorder
        self.timeout = 30.0
        self.flows: dict[str, http.HTTPFlow] = {}  # in flight: request head in, not ended
        self.draining = False
        self.ended = 0  # exchanges in flight or begun while draining that ended since
        self.served: set[Any] = set()  # connections with an exchange ended: kept alive
        self._task: asyncio.Task[None] | None = None
        self._began = 0.0
        # How the stop went: how, after how long, whether it drained, and how many exchanges
        # the recorder interrupted at the deadline (those the end interrupts are added then).
        self._stopped: tuple[str, float, bool, int] | None = None

    def load(self, loader: Loader) -> None:
        loader.add_option(
            "ssetape_drain_timeout",
            str,
            "30",
            "Seconds the first SIGTERM or SIGINT lets the exchanges in flight finish (new "
            "connections refused, /readyz 503) before what is left is interrupted; a second "
            "signal stops at once. 0: stop at once.",
        )

    def configure(self, updated: set[str]) -> None:
        if "ssetape_drain_timeout" in updated:
            value = ctx.options.ssetape_drain_timeout
            self.timeout = seconds("ssetape_drain_timeout", value, low=0, high=86400)

    async def running(self) -> None:
        # Replaces the runner's handlers (which stop at once) once the proxy serves. Only the
        # main thread may have them: `ssetape run` stops its thread's proxy itself.
        loop = asyncio.get_running_loop()
        for sig in SIGNALS:
            with contextlib.suppress(RuntimeError, ValueError):
                loop.add_signal_handler(sig, self.signalled, sig.name)

    # The exchanges in flight.

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        self.flows[flow.id] = flow

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        if self.draining:
            _close_after(flow)

    def response(self, flow: http.HTTPFlow) -> None:
        if flow.websocket is not None:  # a session begins: in flight until it ends
            return
        if self.draining:  # its head went out before the drain: still, close after it
            _close_after(flow)
        self._ended(flow)

    def websocket_end(self, flow: http.HTTPFlow) -> None:
        self._ended(flow)

    def error(self, flow: http.HTTPFlow) -> None:
        self._ended(flow)

    def _ended(self, flow: http.HTTPFlow) -> None:
        if self.flows.pop(flow.id, None) is not None:
            self.served.add(flow.client_conn.id)
            # A stream reset before its request was whole is no exchange: not counted.
            recorded = META in flow.metadata or SESSION_META in flow.metadata
            if self.draining and (self.recorder is None or recorded):
                self.ended += 1

    def client_disconnected(self, client: connection.Client) -> None:
        self.served.discard(client.id)

    # The stop.

    def signalled(self, name: str) -> None:
        """On the proxy's loop: drain at the first signal, stop at once at the second."""
        loop = asyncio.get_running_loop()
        if self.draining:
            task, self._task = self._task, None
            if task is not None and not task.done():  # else it is stopping already
                task.cancel()
                self._stop(f"by a second signal ({name})")
        elif self.timeout <= 0:
            self._stop("at the stop (drain timeout 0)")
        else:
            # /readyz says so from now on, before the task's first step.
            self.draining, self._began = True, loop.time()
            self._task = loop.create_task(self.drain(name))

    async def drain(self, name: str = "SIGTERM") -> None:
        """Stop accepting, let what is in flight end (``timeout`` seconds at most), stop."""
        loop = asyncio.get_running_loop()
        if not self.draining:
            self.draining, self._began = True, loop.time()
        if self.flows:
            n = len(self.flows)
            log.info(
                "ssetape: %s: draining %d exchange%s in flight for at most %g s (new "
                "connections refused); SIGTERM or Ctrl-C again stops at once",
                name, n, "" if n == 1 else "s", self.timeout,
            )  # fmt: skip
        server = _proxyserver()
        if server is not None:
            await _stop_listening(server)
        idle: set[Any] = set()
        while self._in_flight(server) and loop.time() - self._began < self.timeout:
            idle = self._close_idle(server, idle)
            await asyncio.sleep(SWEEP)
        # Counted as the recorder ends them, not as the flows in flight: a flow in flight
        # may have no exchange (reset before its request was whole), and streams go on
        # beginning until the connections close below (the end interrupts those).
        late = bool(self.flows)
        how = f"at the {self.timeout:g} s deadline" if late else "at the stop"
        cut = 0
        if late and self.recorder is not None:
            cut = self.recorder.interrupt(DEADLINE.format(self.timeout))
        self._stopped = (how, loop.time() - self._began, True, cut)
        # Every connection closed before the loop stops: a handler cancelled by asyncio's
        # own teardown starts hook tasks that never run (reported as destroyed at exit).
        if server is not None:
            for handler in list(server.connections.values()):
                _close(handler)
            end = loop.time() + CLOSE_WAIT
            while server.connections and loop.time() < end:
                await asyncio.sleep(0.01)
        ctx.master.shutdown()

    def _in_flight(self, server: Any) -> bool:
        """Whether anything is still in flight; a flow whose connection is gone is over."""
        if server is not None:
            for key, flow in list(self.flows.items()):
                if flow.client_conn.id not in server.connections:
                    del self.flows[key]
                    # Gone without its hooks: an exchange of it is the recorder's to end.
                    self.ended += self.recorder is None
        return bool(self.flows)

    def _close_idle(self, server: Any, seen: set[Any]) -> set[Any]:
        """Close the connections idle between two requests at this look and the last one
        (one whose exchange just ended gets a sweep to write its last bytes); returns
        those idle for the first time."""
        if server is None:
            return set()
        busy = {flow.client_conn.id for flow in self.flows.values()}
        old = time.time() - NEW_IDLE
        idle = {
            cid
            for cid, handler in server.connections.items()
            if cid not in busy and (cid in self.served or handler.client.timestamp_start < old)
        }
        for cid in idle & seen:
            _close(server.connections[cid])
        return idle - seen

    def _stop(self, how: str) -> None:
        took = asyncio.get_running_loop().time() - self._began if self.draining else 0.0
        # Counted as the recorder interrupts them at its end: streams still end meanwhile.
        self._stopped = (how, took, self.draining, 0)
        ctx.master.shutdown()

    def note(self, interrupted: int) -> str | None:
        """The end of the exit line: how the stop went, given how many exchanges the
        recorder's end interrupted (beside those the deadline did)."""
        how, took, drained, cut = self._stopped or ("at the stop", 0.0, False, 0)
        return drain_note(self.ended, cut + interrupted, how, took, drained=drained)

    def done(self) -> None:
        """Before the recorder's: its exit line ends with how the stop went."""
        if self._task is not None and not self._task.done():  # stopped some other way
            self._task.cancel()
        server = _proxyserver()
        if server is not None:  # stopping at once: nothing more is accepted meanwhile
            for s in _listening(server):
                s.close()
        if self.recorder is not None:
            self.recorder.exit_note = self.note


def _proxyserver() -> Any:
    return ctx.master.addons.get("proxyserver")


async def _stop_listening(server: Any) -> None:
    """Close the proxy's listening sockets without resetting a connection already made.

    The kernel completes connections before asyncio accepts them, and asyncio attaches an
    accepted one to its server a turn of the loop later: a connection still queued when its
    socket closes is reset by the kernel, and one accepted but not yet attached is dropped
    (asyncio 3.11 fails to attach it to a closed server and closes it unanswered). A reset
    is an error to the client, where a refusal is one a load balancer retries elsewhere.
    So the loop turns until a few turns in a row found nothing queued, and the sockets are
    closed right after the last look (nothing runs between)."""
    listening = _listening(server)
    quiet = 0
    for _ in range(1000):
        quiet = 0 if any(_waiting(s) for s in listening) else quiet + 1
        if quiet > QUIET_TURNS:
            break
        await asyncio.sleep(0)  # a turn: queued connections accepted, accepted ones attached
    for s in listening:
        s.close()  # mitmproxy's own close below finds it closed
    await server.servers.update([])


def _listening(server: Any) -> list[asyncio.Server]:
    """The proxy's asyncio servers (UDP ones have no accept queue)."""
    return [
        s
        for instance in server.servers
        for s in getattr(instance, "_servers", ())
        if isinstance(s, asyncio.Server)
    ]


def _waiting(s: asyncio.Server) -> bool:
    """Whether a connection waits in one of ``s``'s accept queues."""
    fds = [sock.fileno() for sock in s.sockets]
    return bool(fds) and bool(select.select(fds, [], [], 0)[0])


def _close_after(flow: http.HTTPFlow) -> None:
    """``Connection: close`` on an HTTP/1 response (HTTP/2 has no such header); never on a
    101, whose ``Connection: Upgrade`` the WebSocket handshake needs."""
    resp = flow.response
    if (
        resp is not None
        and resp.status_code != 101
        and flow.request.http_version.startswith("HTTP/1")
    ):
        resp.headers["connection"] = "close"


def _close(handler: Any) -> None:
    """End a client connection as if the client had gone: its transport task is cancelled,
    which closes the socket after what was written to it."""
    io = handler.transports.get(handler.client)
    task = io.handler if io is not None else None
    if task is not None and not task.done():
        task.cancel()


async def settled(main: Coroutine[Any, Any, None], wait: float = CLOSE_WAIT) -> None:
    """``main``, then every task still pending cancelled and awaited (``wait`` seconds per
    round, at most): cancelling a connection's handler starts hook tasks of its own, and
    ``asyncio.run`` cancels only the tasks it found, so those were left pending and reported
    ("Task was destroyed but it is pending!") after the exit line."""
    try:
        await main
    finally:
        me = asyncio.current_task()
        for _ in range(10):
            pending = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
            if not pending:
                break
            for t in pending:
                t.cancel()
            await asyncio.wait(pending, timeout=wait)
