"""`ssetape_db` changed while the proxy relays streams (mitmweb's options, a script): the new
store is opened and migrated off the event loop, so a slow or silent PostgreSQL never stalls
the streams in flight; the old store keeps recording until the new one is open, and stays if
it cannot be. In process (``mitmproxy.test.taddons``): real addon, real recording process,
real SQLite, and a loopback server that accepts and never answers as the silent database."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
from mitmproxy import exceptions

from ssetape.addons.recorder import Recorder


def _silent_server() -> tuple[socket.socket, int]:
    """A loopback listener that accepts connections and never says a word."""
    srv = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            held.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    return srv, srv.getsockname()[1]


async def _until(done: Callable[[], bool], limit: float = 30) -> None:
    end = time.monotonic() + limit
    while not done() and time.monotonic() < end:
        await asyncio.sleep(0.05)


def test_a_store_switched_while_streams_flow_never_stalls_the_loop(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from mitmproxy.test import taddons
    srv, port = _silent_server()

    async def body() -> dict[str, object]:
        loop = asyncio.get_running_loop()
        rec = Recorder()
        out: dict[str, object] = {}
        with taddons.context(rec) as tctx:
            tctx.configure(rec, ssetape_db=str(tmp_path / "a.db"))
            first = rec.store
            await rec.running()  # the proxy is up: streams flow from here on
            lags: list[float] = []

            async def tick() -> None:
                while True:
                    t = loop.time()
                    await asyncio.sleep(0.02)
                    lags.append(loop.time() - t - 0.02)

            ticker = loop.create_task(tick())
            silent = f"postgresql+psycopg://u@127.0.0.1:{port}/db?connect_timeout=3"
            t0 = time.monotonic()
            tctx.configure(rec, ssetape_db=silent)
            out["configure_s"] = time.monotonic() - t0
            await _until(lambda: not rec._reopening)
            out["kept_old"] = rec.store is first
            out["worst_lag_s"] = max(lags)
            ticker.cancel()

            tctx.configure(rec, ssetape_db=str(tmp_path / "b.db"))
            await _until(lambda: rec.store is not first)
            out["switched_to"] = str(rec.store.url if rec.store else None)
            with pytest.raises(exceptions.OptionsError, match="unsupported database"):
                tctx.configure(rec, ssetape_db="mysql://u@127.0.0.1/db")
            rec.done()
        return out

    try:
        out = asyncio.run(body())
    finally:
        srv.close()
    # The silent database took its 3 s connect timeout; the loop never waited for it (the
    # margins are wide: a loaded machine's loop lags by tens of milliseconds on its own).
    assert isinstance(out["configure_s"], float) and out["configure_s"] < 1.0, out
    assert isinstance(out["worst_lag_s"], float) and out["worst_lag_s"] < 1.5, out
    assert out["kept_old"] is True, out
    assert str(out["switched_to"]).endswith("b.db"), out
