"""What the recorder tells an operator's observability stack: Prometheus metrics
(:mod:`ssetape.telemetry.metrics`, served at ``/metrics`` by ``addons.metrics``) and
OpenTelemetry spans over OTLP (:mod:`ssetape.telemetry.otlp`, ``--otlp``)."""

from __future__ import annotations

__all__ = ["OTLP_EXTRA", "otlp_missing"]

OTLP_EXTRA = (
    "the OpenTelemetry extra: pip install 'ssetape[otlp]' "
    "(opentelemetry-sdk, opentelemetry-exporter-otlp-proto-http)"
)


def otlp_missing(e: ImportError) -> bool:
    """Whether ``e`` says the OpenTelemetry extra is not installed (the SDK, the exporter, or
    the protobuf runtime under them), rather than a bug."""
    return (e.name or "").partition(".")[0] in ("opentelemetry", "google")
