"""What ``--otlp`` did, in the ``/metrics`` of ``--metrics``: spans sent, dropped, failed."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ssetape.telemetry.otlp import SpanTotals

__all__ = ["SpanCounts"]


class SpanCounts(Collector):
    """``totals``: the sink's counts now (any thread), None while ``--otlp`` is off."""

    def __init__(self, totals: Callable[[], SpanTotals | None]) -> None:
        self.totals = totals

    def collect(self) -> Iterator[Metric]:
        t = self.totals()
        if t is None:
            return
        spans = CounterMetricFamily(
            "ssetape_otlp_spans",
            "Spans of stored exchanges (--otlp): sent (the collector took them), dropped "
            "(not made: the export queue was full), failed (refused, or not sent after the "
            "exporter's retries).",
            labels=["result"],
        )
        for result, n in (("sent", t.sent), ("dropped", t.dropped), ("failed", t.failed)):
            spans.add_metric([result], n)
        yield spans
        yield GaugeMetricFamily(
            "ssetape_otlp_spans_queued", "Spans made and waiting for export.", value=t.pending
        )
