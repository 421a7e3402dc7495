"""Health checks for a load balancer or an alert: ``/healthz`` and ``/readyz`` on a small
admin address of their own (``ssetape_admin``, ``ssetape record --admin HOST:PORT``).

``/healthz``: the proxy's event loop answers, its recording process is alive and takes what
it is handed. ``/readyz``: that, and the proxy is accepting (not starting, not draining
the exchanges in flight at a SIGTERM (``addons.drain``), not stopping),
the recording process has its store open and is not failing to write, and the link to it has
room (``recording.health`` says how each is told). 200 when every check passes, else 503;
both with a JSON body naming each check, whether it passed and its state.

The server runs on a thread of its own (the standard library's ``ThreadingHTTPServer``),
never on the proxy's event loop; asking the loop whether it answers waits at most
:data:`LOOP_WAIT` seconds, on the asking thread. Add it after the recorder: while the
recorder stores what is left at the end, ``/readyz`` says it is stopping; the server stops
after that.

One small server for an operator to open: ``/metrics`` (``addons.metrics``, ``ssetape
record --metrics HOST:PORT``) is served beside them. It listens at each address an option
names: ``--admin`` and ``--metrics`` at one address share one listener, ``--metrics`` alone
serves the health checks there too, and two addresses are two listeners of the same server,
each answering all three paths.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
from mitmproxy import ctx, exceptions
from mitmproxy.addonmanager import Loader

from ssetape.addons.drain import Drain
from ssetape.addons.recorder import Recorder
from ssetape.recording.health import Check, Health

__all__ = ["Admin", "parse_address"]

LOOP_WAIT = 2.0  # seconds the proxy's event loop may take to answer before it counts as stuck
SAMPLE_EVERY = 0.5  # seconds between two looks at the recording process


def parse_address(value: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[V6]:PORT`` or ``PORT`` (on loopback); ValueError saying why not."""
    host, sep, port = value.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", value
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{value!r} is not HOST:PORT (a port from 0 to 65535)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{value!r}: {host!r} is not an IPv6 address") from None
    elif ":" in host:
        raise ValueError(f"{value!r}: write an IPv6 host in brackets, [::1]:PORT")
    return host or "127.0.0.1", int(port)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], admin: Admin) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.admin = admin
        super().__init__(address, _Handler)

    def service_actions(self) -> None:  # on the serving thread, every poll interval
        self.admin.sample()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # HAProxy's health check resets its connection once it has read the status line:
        # the answer's body then meets a reset. Not worth a traceback every few seconds.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        path = self.path.partition("?")[0]
        route = self.server.admin.routes.get(path)
        if route is not None:  # /metrics (addons.metrics)
            self._send(200, *route(self.headers.get("Accept", "")))
            return
        if path not in ("/healthz", "/readyz"):
            served = ", ".join(["/healthz", "/readyz", *self.server.admin.routes])
            self._answer(404, {"error": f"not found: {served}"})
            return
        checks = self.server.admin.checks(ready=path == "/readyz")
        ok = all(c.ok for c in checks)
        body = {
            "status": "ok" if ok else "failing",
            "checks": {c.name: {"ok": c.ok, "state": c.state} for c in checks},
        }
        self._answer(200 if ok else 503, body)

    def do_HEAD(self) -> None:
        self.do_GET()

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        self._send(status, orjson.dumps(body) + b"\n", "application/json")

    def _send(self, status: int, data: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # a load balancer asks every few seconds: not a line each time


def _stop(server: _Server | None, thread: threading.Thread | None) -> None:
    if server is None:
        return
    if thread is not None:
        server.shutdown()  # waits for serve_forever to return: at most a poll interval
        thread.join(5.0)
    server.server_close()


class Admin:
    def __init__(self, recorder: Recorder, drain: Drain | None = None) -> None:
        self.recorder = recorder
        self.drain = drain
        self.health = Health()
        # Further paths and what answers them (Accept header -> body, content type): the
        # metrics' /metrics (addons.metrics), served at every address.
        self.routes: dict[str, Callable[[str], tuple[bytes, str]]] = {}
        # The address each option asks for (ssetape_admin, ssetape_metrics), and a server
        # per address: two options naming one address share it.
        self._wanted: dict[str, str] = {}
        self._servers: dict[str, tuple[_Server, threading.Thread]] = {}
        self._recording = True  # ssetape_record, read on the loop for the serving thread
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = False

    def load(self, loader: Loader) -> None:
        loader.add_option(
            "ssetape_admin",
            str,
            "",
            "HOST:PORT (or PORT, on 127.0.0.1) to answer /healthz and /readyz on, for a load "
            "balancer or an alert: 200 or 503 with a JSON body naming each check. Empty: off.",
        )

    @property
    def url(self) -> str | None:
        """Where it answers /healthz (the port chosen, for port 0), while it does."""
        return self.url_for("ssetape_admin") or self.url_for("ssetape_metrics")

    def url_for(self, option: str) -> str | None:
        """Where it listens for ``option``'s address, while it does."""
        got = self._servers.get(self._wanted.get(option, ""))
        if got is None:
            return None
        host, port = str(got[0].server_address[0]), int(got[0].server_address[1])
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}"

    def configure(self, updated: set[str]) -> None:
        if "ssetape_record" in ctx.options:
            self._recording = ctx.options.ssetape_record
        if "ssetape_admin" in updated:
            self.listen("ssetape_admin", ctx.options.ssetape_admin)

    def listen(self, option: str, value: str) -> None:
        """Serve at ``value`` (HOST:PORT) for ``option``, "" for no longer; an address
        another option names already is served by the same server. OptionsError naming
        ``option`` when it cannot listen there."""
        value, old = value.strip(), self._wanted.get(option, "")
        if value == old:
            return
        if value and value not in self._servers:
            try:
                server = _Server(parse_address(value), self)
            except ValueError as e:
                raise exceptions.OptionsError(f"{option}: {e}") from None
            except OSError as e:
                raise exceptions.OptionsError(
                    f"{option}: cannot listen on {value}: {e.strerror}"
                ) from None
            thread = threading.Thread(
                target=server.serve_forever,
                kwargs={"poll_interval": SAMPLE_EVERY},
                name="ssetape-admin",
                daemon=True,
            )
            thread.start()
            self._servers[value] = (server, thread)
        self._wanted[option] = value
        # A change at runtime: the old server stops on a thread of its own (that takes up to
        # a poll interval), never on the proxy's loop; the new one was bound first, so a bad
        # address leaves the old one serving.
        if old and old not in self._wanted.values():
            old_server = self._servers.pop(old)
            threading.Thread(target=_stop, args=old_server, name="ssetape-admin-stop").start()

    async def running(self) -> None:
        self._loop = asyncio.get_running_loop()

    def done(self) -> None:
        """After the recorder's: the proxy has stopped, so does the server (at most a poll
        interval)."""
        self._stopping = True
        servers, self._servers, self._wanted = list(self._servers.values()), {}, {}
        for server, thread in servers:
            _stop(server, thread)

    # On the server's threads.

    def sample(self) -> None:
        link = self.recorder.link
        self.health.sample(link.health() if link is not None else None)

    def checks(self, *, ready: bool) -> list[Check]:
        link = self.recorder.link
        # The recorder lets go of its link as it stops (then stores what is left).
        stopping = self._stopping or (self._loop is not None and self._recording and link is None)
        got = [self._proxy(stopping)]
        if ready:
            draining = self.drain is not None and self.drain.draining
            state = (
                "stopping"
                if stopping
                else "draining"
                if draining
                else "starting"
                if self._loop is None
                else "yes"
            )
            got.append(Check("accepting", state == "yes", state, ready_only=True))
        if not stopping:
            on = link.health() if link is not None and self._recording else None
            got += self.health.checks(on)
        return [c for c in got if ready or not c.ready_only]

    def _proxy(self, stopping: bool) -> Check:
        loop = self._loop
        if stopping:  # alive, storing what is left (its loop is busy with that)
            return Check("proxy", True, "stopping")
        if loop is None:
            return Check("proxy", False, "starting")
        answered = threading.Event()
        try:
            loop.call_soon_threadsafe(answered.set)
        except RuntimeError:  # closed
            return Check("proxy", False, "its event loop is closed")
        if not answered.wait(LOOP_WAIT):
            return Check("proxy", False, f"its event loop did not answer in {LOOP_WAIT:g} s")
        return Check("proxy", True, "running")
