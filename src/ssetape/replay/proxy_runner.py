"""Runs mitmproxy in-process with ssetape's addons: what `ssetape record` and `replay` start."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable
from typing import Any

from mitmproxy import ctx, exceptions
from mitmproxy.hooks import ConfigureHook
from mitmproxy.options import Options
from mitmproxy.tools.dump import DumpMaster

from ssetape.replay.http_server import raise_fd_limit

log = logging.getLogger("ssetape.proxy")
# Loggers whose INFO lines an operator must see although the terminal log shows warnings only
# (mitmproxy's own INFO is per-connection chatter): what retention removed from the store, a drain,
# where spans go and how many went (--otlp).
# The terminal log's verbosity is the root logger's level, so a level of their own does it.
SHOWN_INFO = ("ssetape.retention", "ssetape.drain", "ssetape.otlp")


class ProxyStartError(RuntimeError):
    """The proxy could not start (bad option, port in use, bad database)."""


class _Ready:
    """Reports the listening address once mitmproxy's servers are up."""

    def __init__(self, callback: Callable[[str, int], None]) -> None:
        self._callback = callback

    def running(self) -> None:
        addrs = ctx.master.addons.get("proxyserver").listen_addrs()
        if addrs:
            host, port = addrs[0][0], addrs[0][1]
            self._callback(host, port)


class ProxyRunner:
    """One mitmproxy master with the given addons and options, until SIGINT/SIGTERM."""

    def __init__(
        self,
        addons: list[Any],
        *,
        mode: str = "regular",
        host: str = "127.0.0.1",
        port: int = 8080,
        confdir: str | None = None,
        options: dict[str, Any] | None = None,
        sets: tuple[str, ...] = (),
        on_ready: Callable[[str, int], None] | None = None,
    ) -> None:
        self.addons = addons
        self.mode = mode
        self.host = host
        self.port = port
        self.confdir = confdir
        self.options = options or {}
        self.sets = sets
        self.on_ready = on_ready
        self.master: DumpMaster | None = None

    async def run(self) -> None:
        base: dict[str, Any] = {
            "listen_host": self.host,
            "listen_port": self.port,
            "mode": [self.mode],
        }
        if self.confdir:
            base["confdir"] = self.confdir
        raise_fd_limit()  # before the guard sizes its connection cap from it
        opts = Options()
        try:
            # Deferred: addon options do not exist yet; each addon sees the real value on its
            # first configure (no default database opened by mistake).
            opts.update_defer(termlog_verbosity="warn", **base, **self.options)
            if self.sets:
                opts.set(*self.sets, defer=True)
            master = DumpMaster(opts, with_termlog=True, with_dumper=False)
            for name in SHOWN_INFO:
                logging.getLogger(name).setLevel(logging.INFO)
            self.master = master
            master.addons.add(*self.addons)
            # mitmproxy applies deferred values before an addon joins the chain, so it never
            # hears of them: configure ours once with the options as they now stand.
            everything = set(master.options.keys())
            for addon in self.addons:
                master.addons.invoke_addon_sync(addon, ConfigureHook(everything))
            if self.on_ready is not None:
                master.addons.add(_Ready(self.on_ready))
            if opts.deferred:
                raise exceptions.OptionsError(f"unknown option: {', '.join(opts.deferred)}")
        except exceptions.OptionsError as e:
            raise ProxyStartError(str(e)) from None
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(_quiet_cancellations)
        for sig in (signal.SIGINT, signal.SIGTERM):
            # Not in the main thread the caller stops us instead.
            with contextlib.suppress(RuntimeError, ValueError):
                loop.add_signal_handler(sig, master.shutdown)
        await master.run()

    async def idle(self, timeout: float = 2.0) -> None:
        """Wait (bounded) until no client connection is open: stopping the master while a
        handler still runs makes asyncio print the cancelled task's traceback."""
        if self.master is None:
            return
        server = self.master.addons.get("proxyserver")
        deadline = asyncio.get_running_loop().time() + timeout
        while server.connections and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)

    def shutdown(self) -> None:
        if self.master is not None:
            self.master.shutdown()


def _quiet_cancellations(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """Stopping with clients still connected cancels their handlers; asyncio's stream
    callback then reports each cancellation as an "Exception in callback" traceback."""
    if isinstance(context.get("exception"), asyncio.CancelledError):
        return
    loop.default_exception_handler(context)
