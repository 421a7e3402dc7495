"""/healthz and /readyz in process: the real Recorder and Admin addons, a real recording
process and SQLite file, a real HTTP server on loopback. Ready while the recording process
runs; not once it is killed, until the next exchange starts another; not while stopping;
gone after done. A bad address is a one-line option error."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sqlite3
import time
import warnings
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from mitmproxy import exceptions

from ssetape.addons.admin import Admin
from ssetape.addons.recorder import Recorder
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store

with warnings.catch_warnings():  # mitmproxy's test helpers import ldap3 and passlib
    warnings.simplefilter("ignore", DeprecationWarning)
    from mitmproxy.test import taddons, tflow, tutils

WAIT = 30.0  # seconds a state may take to show (the machine is loaded)


def get(url: str) -> tuple[int, dict[str, Any]]:
    r = httpx.get(url, timeout=WAIT)
    assert r.headers["content-type"] == "application/json"
    return r.status_code, orjson.loads(r.content)


async def answer(url: str) -> tuple[int, dict[str, Any]]:
    """Off the loop: the health check asks the proxy's loop whether it answers."""
    return await asyncio.to_thread(get, url)


async def until(url: str, status: int) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT
    while True:
        got, body = await answer(url)
        if got == status:
            return body
        assert time.monotonic() < deadline, (url, got, body)
        await asyncio.sleep(0.1)


async def record_one(rec: Recorder) -> None:
    flow = tflow.tflow()
    rec.requestheaders(flow)
    await rec.request(flow)
    flow.response = tutils.tresp(content=b"hi")
    rec.response(flow)


def failed(body: dict[str, Any]) -> set[str]:
    return {name for name, c in body["checks"].items() if not c["ok"]}


def test_ready_with_a_live_recording_process_not_while_it_is_down_nor_stopping(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "tape.db")

    async def run() -> None:
        rec = Recorder()
        admin = Admin(rec)
        with taddons.context(rec, admin) as tctx:
            tctx.configure(rec, ssetape_db=db)
            tctx.configure(admin, ssetape_admin="127.0.0.1:0")
            assert admin.url is not None and admin.url.startswith("http://127.0.0.1:")
            health, ready = admin.url + "/healthz", admin.url + "/readyz"
            status, body = await answer(ready)  # the proxy is not running yet
            assert status == 503 and body["checks"]["accepting"]["state"] == "starting"
            await rec.running()
            await admin.running()
            body = await until(ready, 200)
            assert body["status"] == "ok" and not failed(body)
            assert set(body["checks"]) == {
                "proxy", "accepting", "recording_process", "writing", "store", "backlog"
            }  # fmt: skip
            status, body = await answer(health)
            assert status == 200 and set(body["checks"]) == {
                "proxy",
                "recording_process",
                "writing",
            }
            await record_one(rec)
            assert rec.link is not None
            while not rec.link.settled():  # stored: the kill costs nothing recorded
                await asyncio.sleep(0.05)

            assert rec.link.pid is not None
            os.kill(rec.link.pid, signal.SIGKILL)
            body = await until(ready, 503)
            assert body["status"] == "failing" and failed(body) == {"recording_process"}
            assert body["checks"]["recording_process"]["state"].startswith("down")
            status, _ = await answer(health)
            assert status == 503
            await asyncio.sleep(1.2)  # past the first restart's backoff
            await record_one(rec)  # the next exchange starts another one
            await until(ready, 200)
            await until(health, 200)

            rec.done()  # stores what is left; the admin's done comes after the recorder's
            status, body = await answer(ready)
            assert status == 503 and failed(body) == {"accepting"}
            assert body["checks"]["accepting"]["state"] == "stopping"
            admin.done()
            with pytest.raises(httpx.ConnectError):
                httpx.get(ready, timeout=5)
        with Store.open(db, create=False) as store:
            assert len(list(Queries(store).exchanges())) == 2  # one each side of the kill

    asyncio.run(run())


def test_not_ready_while_the_store_fails_ready_again_once_it_writes(tmp_path: Path) -> None:
    db = str(tmp_path / "tape.db")

    async def run() -> None:
        rec = Recorder()
        admin = Admin(rec)
        with taddons.context(rec, admin) as tctx:
            # SQLite's busy timeout is the store deadline: a lock fails a write after 1 s.
            tctx.configure(rec, ssetape_db=db, ssetape_store_timeout="1")
            tctx.configure(admin, ssetape_admin="127.0.0.1:0")
            await rec.running()
            await admin.running()
            assert admin.url is not None
            ready, health = admin.url + "/readyz", admin.url + "/healthz"
            await until(ready, 200)
            lock = sqlite3.connect(db, isolation_level=None, timeout=10)
            lock.execute("BEGIN EXCLUSIVE")  # another process holds the write lock
            try:
                await record_one(rec)
                body = await until(ready, 503)
                assert failed(body) == {"store"}
                assert body["checks"]["store"]["state"].startswith("failing, retrying")
                assert "locked" in body["checks"]["store"]["state"]
                status, _ = await answer(health)
                assert status == 200  # alive: it keeps the rows and retries
            finally:
                lock.execute("ROLLBACK")
                lock.close()
            await until(ready, 200)
            rec.done()
            admin.done()
        with Store.open(db, create=False) as store:
            assert len(list(Queries(store).exchanges())) == 1  # written once the lock went

    asyncio.run(run())


def test_a_bad_address_or_a_port_in_use_is_a_one_line_option_error() -> None:
    rec = Recorder()
    admin = Admin(rec)
    with taddons.context(admin) as tctx, socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for value, says in [
            ("127.0.0.1:http", "not HOST:PORT"),
            ("localhost:70000", "not HOST:PORT"),
            ("::1:9000", "in brackets"),
            (f"127.0.0.1:{port}", f"cannot listen on 127.0.0.1:{port}"),
        ]:
            with pytest.raises(exceptions.OptionsError) as e:
                tctx.configure(admin, ssetape_admin=value)
            assert says in str(e.value) and "\n" not in str(e.value)
            assert admin.url is None
        # A port alone listens on loopback.
        with socket.socket() as free:
            free.bind(("127.0.0.1", 0))
            port = free.getsockname()[1]
        tctx.configure(admin, ssetape_admin=str(port))
        assert admin.url == f"http://127.0.0.1:{port}"
        admin.done()
        assert admin.url is None


def test_a_new_address_at_runtime_moves_the_server_a_bad_one_leaves_it() -> None:
    rec = Recorder()
    admin = Admin(rec)
    with taddons.context(admin) as tctx:
        tctx.configure(admin, ssetape_admin="127.0.0.1:0")
        first = admin.url
        assert first is not None
        with pytest.raises(exceptions.OptionsError):
            tctx.configure(admin, ssetape_admin="127.0.0.1:nope")
        assert admin.url == first and httpx.get(first + "/healthz", timeout=WAIT).status_code
        tctx.configure(admin, ssetape_admin="0")  # loopback, another free port
        second = admin.url
        assert second is not None and second != first
        assert get(second + "/healthz")[0] == 503  # the proxy is not running: starting
        deadline = time.monotonic() + WAIT
        while True:  # the old one stops on a thread of its own
            try:
                httpx.get(first + "/healthz", timeout=5)
            except httpx.TransportError:  # refused, or reset as it closes
                break
            assert time.monotonic() < deadline
            time.sleep(0.1)
        admin.done()
