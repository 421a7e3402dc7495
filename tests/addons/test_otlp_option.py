"""``ssetape_otlp`` in process: the real Recorder, Admin, Metrics and Otlp addons, a real
recording process and SQLite file, a real OTLP/HTTP receiver on loopback. Each stored exchange
reaches the receiver as a span and ``/metrics`` counts the spans sent; a collector that is
down costs the recorder nothing and its spans are counted failed; a proxy without the extra,
and a setting ssetape cannot follow, are one-line option errors."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
import warnings
from pathlib import Path

import pytest
from mitmproxy import exceptions

from ssetape.addons.admin import Admin
from ssetape.addons.metrics import Metrics
from ssetape.addons.otlp import Otlp
from ssetape.addons.recorder import Recorder
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from tests.addons.test_admin import record_one
from tests.addons.test_metrics_option import scrape

with warnings.catch_warnings():  # mitmproxy's test helpers import ldap3 and passlib
    warnings.simplefilter("ignore", DeprecationWarning)
    from mitmproxy.test import taddons

pytest.importorskip("opentelemetry.sdk", reason="the otlp extra (opentelemetry-sdk)")

from tests.otlp_receiver import otlp_receiver

WAIT = 30.0


def test_each_stored_exchange_is_a_span_and_metrics_count_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = str(tmp_path / "tape.db")

    async def run() -> None:
        with otlp_receiver() as receiver:
            monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
            monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
            rec = Recorder()
            admin = Admin(rec)
            metrics = Metrics(rec, admin)
            otlp = Otlp(rec)
            with taddons.context(rec, admin, metrics, otlp) as tctx:
                tctx.configure(rec, ssetape_db=db)
                tctx.configure(metrics, ssetape_metrics="127.0.0.1:0")
                tctx.configure(otlp, ssetape_otlp=True)
                for addon in (rec, admin, metrics, otlp):
                    await addon.running()
                for _ in range(3):
                    await record_one(rec)
                await asyncio.to_thread(receiver.wait_for, 3)
                url = admin.url
                assert url is not None
                deadline = time.monotonic() + WAIT
                while (got := await asyncio.to_thread(scrape, url)).get(
                    "ssetape_otlp_spans_total"
                ) != 3:
                    assert time.monotonic() < deadline, got
                    await asyncio.sleep(0.1)
                rec.done()
                otlp.done()
                admin.done()
        with Store.open(db, create=False) as store:
            uids = {x.uid for x in Queries(store).exchanges()}
        assert len(receiver.spans) == 3 and set(receiver.by_uid()) == uids

    asyncio.run(run())


def test_a_collector_down_costs_nothing_and_its_spans_are_counted_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    db = str(tmp_path / "tape.db")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")  # refused
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")

    async def run() -> None:
        rec = Recorder()
        otlp = Otlp(rec)
        with taddons.context(rec, otlp) as tctx:
            tctx.configure(rec, ssetape_db=db)
            tctx.configure(otlp, ssetape_otlp=True)
            await rec.running()
            await otlp.running()
            t = time.monotonic()
            for _ in range(3):
                await record_one(rec)
            assert time.monotonic() - t < 10
            sink = otlp.sink
            assert sink is not None
            deadline = time.monotonic() + WAIT
            while sink.totals().made < 3:
                assert time.monotonic() < deadline, sink.totals()
                await asyncio.sleep(0.1)
            rec.done()
            with caplog.at_level(logging.INFO, logger="ssetape.otlp"):
                otlp.done()
            totals = sink.totals()
            assert totals.sent == 0 and totals.failed + totals.pending == 3
            [line] = [r for r in caplog.records if r.name == "ssetape.otlp"]
            assert line.levelno == logging.WARNING and "0 span(s) sent" in line.getMessage()

    asyncio.run(run())


def test_without_the_extra_the_option_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # As if the OpenTelemetry SDK were not installed: importing it fails.
    for name in list(sys.modules):
        if name.startswith(("opentelemetry", "ssetape.telemetry.otlp", "ssetape.telemetry.span")):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    otlp = Otlp(Recorder())
    with taddons.context(otlp) as tctx:
        tctx.configure(otlp, ssetape_otlp=False)  # off: nothing needed
        with pytest.raises(exceptions.OptionsError) as e:
            tctx.configure(otlp, ssetape_otlp=True)
    message = str(e.value)
    assert message.startswith("ssetape_otlp: ") and "ssetape[otlp]" in message
    assert "opentelemetry-sdk" in message and "\n" not in message


def test_a_protocol_other_than_http_protobuf_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    otlp = Otlp(Recorder())
    with (
        taddons.context(otlp) as tctx,
        pytest.raises(exceptions.OptionsError, match="ssetape_otlp: OTEL_EXPORTER_OTLP_PROTOCOL"),
    ):
        tctx.configure(otlp, ssetape_otlp=True)
    assert otlp.sink is None
