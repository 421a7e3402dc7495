"""The drain at a stop, in process: the real Drain, Recorder and Admin addons, a real
recording process and SQLite file, a real admin server on loopback (mitmproxy's test
master has no proxy server: the listening sockets are the end-to-end tests' business,
tests/addons/test_drain_record.py).

Draining, /readyz says so (503) while /healthz stays 200, a response that begins carries
``Connection: close``, the exchanges in flight end recorded whole and the proxy stops once
none is left; at the deadline what is left is stored interrupted, saying why; a second
signal stops at once; the exit line says how the stop went."""

from __future__ import annotations

import asyncio
import time
import warnings
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from mitmproxy import exceptions, http

from ssetape.addons.admin import Admin
from ssetape.addons.drain import DEADLINE, Drain
from ssetape.addons.recorder import STOPPED, Recorder
from ssetape.recording.exit_line import drain_note
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store

with warnings.catch_warnings():  # mitmproxy's test helpers import ldap3 and passlib
    warnings.simplefilter("ignore", DeprecationWarning)
    from mitmproxy.test import taddons, tflow, tutils

WAIT = 30.0  # seconds a state may take to show (the machine is loaded)


def get(url: str) -> tuple[int, dict[str, Any]]:
    r = httpx.get(url, timeout=WAIT)
    return r.status_code, orjson.loads(r.content)


async def begun(drain: Drain, rec: Recorder) -> http.HTTPFlow:
    """A request through the hooks, its response not yet begun."""
    flow = tflow.tflow()
    drain.requestheaders(flow)
    rec.requestheaders(flow)
    await rec.request(flow)
    return flow


def answered(drain: Drain, rec: Recorder, flow: http.HTTPFlow) -> None:
    """``flow``'s whole response, through the hooks in mitmproxy's order."""
    flow.response = tutils.tresp(content=b"whole")
    drain.responseheaders(flow)
    rec.responseheaders(flow)
    drain.response(flow)
    rec.response(flow)


async def stopped(tctx: Any, within: float = WAIT) -> float:
    """Seconds until the addon asked the master to stop."""
    t = time.monotonic()
    while not tctx.master.should_exit.is_set():
        assert time.monotonic() - t < within, "the drain did not stop the proxy"
        await asyncio.sleep(0.01)
    return time.monotonic() - t


def stored(db: str) -> list[tuple[str, str | None]]:
    with Store.open(db, create=False) as store:
        return [(x.state, x.error) for x in Queries(store).exchanges()]


@pytest.mark.parametrize("value", ["-1", "soon", "nan", "90000"])
def test_a_bad_drain_timeout_is_an_option_error(value: str) -> None:
    async def run() -> None:
        drain = Drain()
        with (
            taddons.context(drain) as tctx,
            pytest.raises(exceptions.OptionsError, match="ssetape_drain_timeout"),
        ):
            tctx.configure(drain, ssetape_drain_timeout=value)

    asyncio.run(run())


def test_the_drain_timeout_defaults_to_30_s_and_0_stops_at_once() -> None:
    async def run() -> tuple[float, float, bool]:
        drain = Drain()
        with taddons.context(drain) as tctx:
            default = drain.timeout
            tctx.configure(drain, ssetape_drain_timeout="0")
            drain.requestheaders(tflow.tflow())
            drain.signalled("SIGTERM")
            draining = drain.draining
            await stopped(tctx, within=5)
            drain.done()
            return default, drain.timeout, draining

    assert asyncio.run(run()) == (30.0, 0.0, False)


def test_a_drain_lets_the_exchanges_in_flight_end_then_stops(tmp_path: Path) -> None:
    db = str(tmp_path / "tape.db")

    async def run() -> tuple[Recorder, list[Any], float]:
        rec = Recorder()
        drain = Drain(rec)
        admin = Admin(rec, drain)
        with taddons.context(drain, rec, admin) as tctx:
            tctx.configure(rec, ssetape_db=db)
            tctx.configure(admin, ssetape_admin="127.0.0.1:0")
            await rec.running()
            await admin.running()
            assert admin.url is not None
            first, second = await begun(drain, rec), await begun(drain, rec)
            drain.signalled("SIGTERM")
            # Ready no more, at once; alive all the same.
            seen = [await asyncio.to_thread(get, admin.url + p) for p in ("/readyz", "/healthz")]
            await asyncio.sleep(0.5)
            assert not tctx.master.should_exit.is_set()  # two in flight: it waits
            answered(drain, rec, first)
            await asyncio.sleep(0.3)
            assert not tctx.master.should_exit.is_set()  # one still in flight
            later = await begun(drain, rec)  # on a connection kept alive: served, then closed
            answered(drain, rec, later)
            answered(drain, rec, second)
            took = await stopped(tctx)
            seen.append(later.response.headers.get("connection") if later.response else None)
            drain.done()
            rec.done()
            admin.done()
        return rec, seen, took

    rec, seen, took = asyncio.run(run())
    (ready, ready_body), (health, _), connection = seen
    assert ready == 503 and ready_body["checks"]["accepting"] == {
        "ok": False,
        "state": "draining",
    }
    assert health == 200
    assert connection == "close"
    assert took < 5.0  # it stops once the last one ended, not at the deadline
    assert stored(db) == [("completed", None)] * 3
    assert rec.exit_line is not None
    assert rec.exit_line.startswith("ssetape: 0 events in 3 exchanges stored, none lost; ")
    assert rec.exit_line.split("; ")[1].startswith("drained 3 exchanges in ")


def test_at_the_deadline_what_is_left_is_stored_interrupted_and_counted(tmp_path: Path) -> None:
    db = str(tmp_path / "tape.db")

    async def run() -> tuple[Recorder, float]:
        rec = Recorder()
        drain = Drain(rec)
        with taddons.context(drain, rec) as tctx:
            tctx.configure(rec, ssetape_db=db)
            tctx.configure(drain, ssetape_drain_timeout="0.5")
            await rec.running()
            quick, slow = await begun(drain, rec), await begun(drain, rec)
            drain.signalled("SIGTERM")
            answered(drain, rec, quick)
            took = await stopped(tctx)
            drain.done()
            rec.done()
            assert slow.response is None
        return rec, took

    rec, took = asyncio.run(run())
    assert 0.4 < took < 10.0
    assert sorted(stored(db)) == [("completed", None), ("interrupted", DEADLINE.format(0.5))]
    assert rec.exit_line is not None
    assert rec.exit_line.endswith(
        "; drained 1 exchange, 1 exchange interrupted at the 0.5 s deadline"
    )


def test_a_second_signal_stops_at_once(tmp_path: Path) -> None:
    db = str(tmp_path / "tape.db")

    async def run() -> tuple[Recorder, float]:
        rec = Recorder()
        drain = Drain(rec)
        with taddons.context(drain, rec) as tctx:
            tctx.configure(rec, ssetape_db=db)
            await rec.running()
            await begun(drain, rec)
            drain.signalled("SIGTERM")
            await asyncio.sleep(0.3)
            assert not tctx.master.should_exit.is_set()
            drain.signalled("SIGINT")
            took = await stopped(tctx, within=5)
            drain.done()
            rec.done()
        return rec, took

    rec, took = asyncio.run(run())
    assert took < 1.0
    assert stored(db) == [("interrupted", STOPPED)]
    assert rec.exit_line is not None
    assert rec.exit_line.endswith(
        "; drained 0 exchanges, 1 exchange interrupted by a second signal (SIGINT)"
    )


def test_the_note_of_a_stop() -> None:
    assert drain_note(0, 0, "at the stop", 0.0) is None  # nothing was in flight
    assert drain_note(0, 0, "at the stop", 0.0, drained=False) is None
    assert drain_note(2, 0, "", 4.25) == "drained 2 exchanges in 4.2 s"
    assert drain_note(0, 3, "at the stop (drain timeout 0)", 0.0, drained=False) == (
        "3 exchanges in flight interrupted at the stop (drain timeout 0)"
    )
