"""The GenAI client metrics over OTLP/HTTP (``--otlp``), beside the spans: the same stored
figures `/metrics` counts, as OpenTelemetry names them.

``gen_ai.client.operation.duration`` (s), ``gen_ai.client.operation.time_to_first_chunk`` (s)
and ``gen_ai.client.token.usage`` (``{token}``, by ``gen_ai.token.type``), with the
conventions' attributes (operation, provider, request model bounded as the Prometheus labels
are: past the first 20 models, ``other``; server address and port; ``error.type`` on the
duration of a failed exchange) and their explicit bucket boundaries. The time per output chunk
is Prometheus' only (``/metrics``): the recording process sends the gaps already counted per
bucket, not one value per gap, which an OTLP histogram would need. The SDK's reader exports
every ``OTEL_METRIC_EXPORT_INTERVAL`` ms (60 s) and at the stop, from a thread of its own.
"""

from __future__ import annotations

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, PeriodicExportingMetricReader
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
from opentelemetry.util.types import AttributeValue

from ssetape import __version__
from ssetape.recording.protocol import StoredExchange
from ssetape.telemetry.conventions import (
    SECONDS_BOUNDS,
    TOKEN_BOUNDS,
    error_type,
    operation_name,
    provider_name,
)
from ssetape.telemetry.labels import Labels
from ssetape.telemetry.otlp import resource

__all__ = ["DURATION", "TIME_TO_FIRST_CHUNK", "TOKEN_USAGE", "GenAiMeters"]

DURATION = "gen_ai.client.operation.duration"
TIME_TO_FIRST_CHUNK = "gen_ai.client.operation.time_to_first_chunk"
TOKEN_USAGE = "gen_ai.client.token.usage"
TOP_MODELS = 20  # as the Prometheus labels' default


class GenAiMeters:
    """Records each stored exchange (any thread); the SDK exports them."""

    def __init__(self, exporter: MetricExporter | None = None) -> None:
        reader = PeriodicExportingMetricReader(exporter or OTLPMetricExporter())
        views = [
            View(instrument_name=name, aggregation=ExplicitBucketHistogramAggregation(bounds))
            for name, bounds in (
                (DURATION, SECONDS_BOUNDS),
                (TIME_TO_FIRST_CHUNK, SECONDS_BOUNDS),
                (TOKEN_USAGE, TOKEN_BOUNDS),
            )
        ]
        self.provider = MeterProvider(
            metric_readers=[reader], resource=resource(), views=views, shutdown_on_exit=False
        )
        meter = self.provider.get_meter("ssetape", __version__)
        self.duration = meter.create_histogram(
            DURATION, unit="s", description="GenAI operation duration."
        )
        self.ttft = meter.create_histogram(
            TIME_TO_FIRST_CHUNK, unit="s", description="Time to the first content event."
        )
        self.tokens = meter.create_histogram(
            TOKEN_USAGE, unit="{token}", description="Tokens used, as the provider reported."
        )
        self.models = Labels(top=TOP_MODELS, hosts=True)

    def record(self, x: StoredExchange) -> None:
        a: dict[str, AttributeValue] = {
            "gen_ai.operation.name": operation_name(x.api),
            "gen_ai.provider.name": provider_name(x.api, x.host),
            "server.address": x.host,
        }
        model = self.models.model(x.model)
        if model:
            a["gen_ai.request.model"] = model
        if x.port is not None:
            a["server.port"] = x.port
        if x.duration_us is not None:
            error = error_type(x)
            self.duration.record(x.duration_us / 1e6, a | ({"error.type": error} if error else {}))
        if x.ttft_us is not None:
            self.ttft.record(x.ttft_us / 1e6, a)
        for kind, count in (("input", x.input_tokens), ("output", x.output_tokens)):
            if count is not None:
                self.tokens.record(count, a | {"gen_ai.token.type": kind})

    def close(self, timeout: float = 5.0) -> None:
        self.provider.force_flush(int(timeout * 1000))
        self.provider.shutdown(int(timeout * 1000))
