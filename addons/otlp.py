"""OpenTelemetry traces and metrics of a recording proxy: ``ssetape record --otlp``
(``ssetape_otlp``).

One span per stored exchange (``ssetape.telemetry.spans``), made from the recording process's
``STORED`` report on the thread that reads its reports, never on the proxy's event loop, and
sent over OTLP/HTTP by the SDK's batch thread (``ssetape.telemetry.otlp``: where to, from the
standard ``OTEL_*`` variables); the GenAI client metrics of the same report beside them
(``ssetape.telemetry.otlp_meters``). ``OTEL_TRACES_EXPORTER=none`` or
``OTEL_METRICS_EXPORTER=none`` leaves one of them out. A collector that is slow or gone
never slows a stream: past the queue's bound a span is dropped and counted. The counts are
in ``/metrics`` when the metrics addon serves it (``ssetape_otlp_spans_total``), and in a
line logged at the stop. Needs the optional extra ``ssetape[otlp]``; without it the option
is refused in one line naming the extra.

Add it after the recorder (and after the metrics addon): it hears the reports of the
recorder's link, attached again whenever the recorder has a new one (``ssetape_db`` changed).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from typing import TYPE_CHECKING, Any

from mitmproxy import ctx, exceptions
from mitmproxy.addonmanager import Loader

from ssetape.addons.link_listener import LinkListener
from ssetape.addons.recorder import Recorder
from ssetape.recording.protocol import Report
from ssetape.telemetry import OTLP_EXTRA, otlp_missing

if TYPE_CHECKING:
    from ssetape.telemetry.otlp import SpanSink
    from ssetape.telemetry.otlp_meters import GenAiMeters

__all__ = ["EXTRA", "Otlp"]

log = logging.getLogger("ssetape.otlp")

EXTRA = OTLP_EXTRA
LOOK_EVERY = 1.0  # seconds between two looks for a new link (ssetape_db changed meanwhile)
CLOSE_WAIT = 5.0  # seconds the spans still queued at the stop may take to go


class Otlp:
    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.sink: SpanSink | None = None
        self.meters: GenAiMeters | None = None
        self._on = False
        self._ear = LinkListener(self._hear)
        self._registry: Any = None  # the metrics addon's, where the span counts are
        self._task: asyncio.Task[None] | None = None

    def load(self, loader: Loader) -> None:
        loader.add_option(
            "ssetape_otlp",
            bool,
            False,
            "Send a span per stored exchange (OpenTelemetry GenAI conventions) over OTLP/HTTP, "
            "where the OTEL_EXPORTER_OTLP_* variables say. Needs the OpenTelemetry extra.",
        )

    def configure(self, updated: set[str]) -> None:
        if "ssetape_otlp" in updated:
            self._configure(ctx.options.ssetape_otlp)
        self._attach()

    def _configure(self, on: bool) -> None:
        if not on:
            self._detach()
            # Off at runtime: the exporter's last send can take CLOSE_WAIT seconds, never on
            # the proxy's event loop (not a daemon: the proxy waits for it at exit).
            parts = self._take()
            threading.Thread(target=_flush, args=parts, name="ssetape-otlp-close").start()
            return
        if self._on:
            return
        try:  # here: a proxy without --otlp needs no OpenTelemetry
            from ssetape.telemetry.otlp import SpanSink, check_environment, endpoint, exporting
            from ssetape.telemetry.otlp_meters import GenAiMeters
        except ImportError as e:
            if not otlp_missing(e):
                raise
            raise exceptions.OptionsError(f"ssetape_otlp: needs {EXTRA}") from None
        try:
            check_environment()
        except ValueError as e:
            raise exceptions.OptionsError(f"ssetape_otlp: {e}") from None
        self.sink = SpanSink() if exporting("traces") else None
        self.meters = GenAiMeters() if exporting("metrics") else None
        self._on = True
        to = [
            endpoint(signal)
            for signal, on in (("traces", self.sink), ("metrics", self.meters))
            if on
        ]
        log.info("ssetape otlp: sending %s to %s", _what(self.sink, self.meters), ", ".join(to))

    async def running(self) -> None:
        self._attach()
        self._task = asyncio.get_running_loop().create_task(self._look())

    async def _look(self) -> None:
        while True:
            await asyncio.sleep(LOOK_EVERY)
            self._attach()

    def done(self) -> None:
        # After the recorder's done (it comes first): its recording process has reported
        # every exchange it stored.
        if self._task is not None:
            self._task.cancel()
        self._detach()
        self._close()

    def _close(self) -> None:
        _flush(*self._take())

    def _take(self) -> tuple[SpanSink | None, GenAiMeters | None]:
        sink, meters, self.sink, self.meters, self._on = self.sink, self.meters, None, None, False
        return sink, meters

    def _attach(self) -> None:
        """Hear the reports of the recorder's link; show the span counts in /metrics."""
        self._expose()
        if self._on:
            self._ear.follow(self.recorder.link)

    def _detach(self) -> None:
        self._ear.stop()

    def _hear(self, kind: Report, value: Any) -> None:  # on the link's reading thread
        sink, meters = self.sink, self.meters
        if kind is not Report.STORED:
            return
        for x in value:
            if meters is not None:
                meters.record(x)
            if sink is not None:
                sink.send(x)

    def _expose(self) -> None:
        with contextlib.suppress(AttributeError):  # no metrics addon, or no --metrics
            registry = ctx.master.addons.get("metrics").metrics.registry
            if registry is not self._registry:
                from ssetape.telemetry.span_counts import SpanCounts

                registry.register(SpanCounts(lambda: s.totals() if (s := self.sink) else None))
                self._registry = registry


def _flush(sink: SpanSink | None, meters: GenAiMeters | None) -> None:
    """Send what is queued (at most CLOSE_WAIT seconds each) and say what became of it."""
    if meters is not None:
        meters.close(CLOSE_WAIT)
    if sink is None:
        return
    t = sink.close(CLOSE_WAIT)
    line = (
        f"ssetape otlp: {t.sent} span(s) sent to {sink.endpoint}; {t.dropped} dropped "
        f"(queue full), {t.failed} failed, {t.pending} not sent by the stop"
    )
    log.log(logging.WARNING if t.lost else logging.INFO, line)


def _what(sink: object, meters: object) -> str:
    spans = "a span per stored exchange" if sink is not None else ""
    metrics = "the GenAI metrics" if meters is not None else ""
    return " and ".join(w for w in (spans, metrics) if w) or "nothing (OTEL_*_EXPORTER=none)"
