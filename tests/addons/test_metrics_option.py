"""``ssetape_metrics`` in process: the real Recorder, Admin and Metrics addons, a real
recording process and SQLite file, a real HTTP server on loopback. /metrics counts what the
store holds; it shares the admin server (one address, or two listeners of it); a bad address,
and a proxy without the metrics extra, are one-line option errors."""

from __future__ import annotations

import asyncio
import socket
import sys
import time
import warnings
from pathlib import Path

import httpx
import pytest
from mitmproxy import exceptions
from prometheus_client.parser import text_string_to_metric_families

from ssetape.addons.admin import Admin
from ssetape.addons.metrics import Metrics
from ssetape.addons.recorder import Recorder
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from tests.addons.test_admin import record_one

with warnings.catch_warnings():  # mitmproxy's test helpers import ldap3 and passlib
    warnings.simplefilter("ignore", DeprecationWarning)
    from mitmproxy.test import taddons

WAIT = 30.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(url: str) -> dict[str, float]:
    """Each sample of /metrics by name, summed over its labels."""
    r = httpx.get(url + "/metrics", timeout=WAIT)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    got: dict[str, float] = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            got[s.name] = got.get(s.name, 0.0) + s.value
    return got


def test_metrics_count_the_exchanges_the_store_holds(tmp_path: Path) -> None:
    db = str(tmp_path / "tape.db")

    async def run() -> None:
        rec = Recorder()
        admin = Admin(rec)
        metrics = Metrics(rec, admin)
        with taddons.context(rec, admin, metrics) as tctx:
            tctx.configure(rec, ssetape_db=db)
            tctx.configure(metrics, ssetape_metrics="127.0.0.1:0")
            await rec.running()
            await admin.running()
            await metrics.running()
            url = admin.url
            assert url is not None
            for _ in range(3):
                await record_one(rec)
            assert rec.link is not None
            deadline = time.monotonic() + WAIT
            # The exchanges come with each commit, the write times every half second: wait
            # for both (a scrape between the two is a fair answer, not a failure).
            while not (
                (got := await asyncio.to_thread(scrape, url)).get("ssetape_exchanges_total") == 3
                and got.get("ssetape_store_write_duration_seconds_count", 0) >= 1
            ):
                assert time.monotonic() < deadline, got
                await asyncio.sleep(0.1)
            # The run row's counts, from the one ledger; the writer's transactions, timed.
            assert got["ssetape_recorded_exchanges_total"] == 3
            assert got["ssetape_lost_events_total"] == 0
            assert got["ssetape_recording_process_up"] == 1
            rec.done()
            admin.done()
        with Store.open(db, create=False) as store:
            assert len(list(Queries(store).exchanges())) == 3

    asyncio.run(run())


def test_one_address_or_two_each_serves_health_and_metrics() -> None:
    rec = Recorder()
    admin = Admin(rec)
    metrics = Metrics(rec, admin)
    with taddons.context(admin, metrics) as tctx:
        tctx.configure(admin, ssetape_admin="127.0.0.1:0")
        health_only = admin.url
        assert health_only is not None
        r = httpx.get(health_only + "/metrics", timeout=WAIT)
        assert r.status_code == 404  # --metrics not given
        # The same address: one listener answers all three.
        tctx.configure(metrics, ssetape_metrics="127.0.0.1:0")
        assert admin.url_for("ssetape_metrics") == admin.url == health_only
        assert "ssetape_streams_in_flight" in scrape(health_only)
        # Another address: a second listener of the same server, answering all three too.
        port = free_port()
        tctx.configure(metrics, ssetape_metrics=f"127.0.0.1:{port}")
        other = f"http://127.0.0.1:{port}"
        assert admin.url_for("ssetape_metrics") == other and admin.url == health_only
        for url in (health_only, other):
            assert "ssetape_streams_in_flight" in scrape(url)
            assert httpx.get(url + "/healthz", timeout=WAIT).status_code in (200, 503)
        # --metrics alone: its address answers the health checks too.
        tctx.configure(admin, ssetape_admin="")
        assert admin.url == other
        assert httpx.get(other + "/readyz", timeout=WAIT).headers["content-type"] == (
            "application/json"
        )
        tctx.configure(metrics, ssetape_metrics="")
        assert admin.url is None
        admin.done()


def test_a_bad_metrics_address_is_a_one_line_option_error() -> None:
    rec = Recorder()
    admin = Admin(rec)
    metrics = Metrics(rec, admin)
    with taddons.context(admin, metrics) as tctx:
        for value, says in [("127.0.0.1:http", "not HOST:PORT"), ("::1:9000", "in brackets")]:
            with pytest.raises(exceptions.OptionsError) as e:
                tctx.configure(metrics, ssetape_metrics=value)
            assert str(e.value).startswith("ssetape_metrics: ") and says in str(e.value)
            assert "\n" not in str(e.value)
        with pytest.raises(exceptions.OptionsError, match="ssetape_metrics_models"):
            tctx.configure(metrics, ssetape_metrics="0", ssetape_metrics_models=0)
        assert admin.url is None
        admin.done()


def test_without_the_metrics_extra_the_option_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # As if prometheus-client were not installed: importing it fails.
    for name in list(sys.modules):
        if name.startswith(("prometheus_client", "ssetape.telemetry")):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    rec = Recorder()
    admin = Admin(rec)
    metrics = Metrics(rec, admin)
    with taddons.context(admin, metrics) as tctx:
        tctx.configure(metrics, ssetape_metrics="")  # off: nothing needed
        with pytest.raises(exceptions.OptionsError) as e:
            tctx.configure(metrics, ssetape_metrics="127.0.0.1:0")
        message = str(e.value)
        assert "ssetape[metrics]" in message and "prometheus-client" in message
        assert "\n" not in message
        assert admin.url is None
        admin.done()
