"""Spans sent over OTLP/HTTP (protobuf), configured as every OpenTelemetry SDK is.

The standard environment variables say where and how: ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or
``..._TRACES_ENDPOINT``), ``..._HEADERS``, ``..._TIMEOUT``, ``..._COMPRESSION``, the TLS
files, ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` (the service is ``ssetape`` when
they name none), ``OTEL_TRACES_SAMPLER``, and ``OTEL_BSP_MAX_QUEUE_SIZE`` and the other batch
settings. It needs the optional extra ``ssetape[otlp]`` (opentelemetry-sdk and
opentelemetry-exporter-otlp-proto-http).

The SDK's ``BatchSpanProcessor`` sends from a thread of its own. Before it, :class:`SpanSink`
keeps the spans waiting for that thread within the queue's size: a live recorder never
waits for a collector (a span past the bound is not made, and counted ``dropped``), and the
SDK's queue never overflows (it would drop silently, logging a line per span). `ssetape
export --otlp` waits for room instead (``wait=True``): an export loses nothing to the queue.
An export the collector refuses, or that times out after the exporter's retries, counts its
spans ``failed``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from ssetape import __version__
from ssetape.recording.content_capture import capture_content
from ssetape.recording.protocol import StoredExchange
from ssetape.telemetry.spans import describe, emit

__all__ = [
    "PROTOCOL", "SpanSink", "SpanTotals", "check_environment", "endpoint", "exporting", "resource",
]  # fmt: skip

PROTOCOL = "http/protobuf"
DEFAULT_QUEUE = 2048  # the SDK's own default for OTEL_BSP_MAX_QUEUE_SIZE
DEFAULT_BATCH = 512
SERVICE = "ssetape"


def endpoint(signal: str = "traces") -> str:
    """Where a signal (traces, metrics) goes, as its exporter resolves it."""
    own = os.environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT", "").strip()
    if own:
        return own
    base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip() or "http://localhost:4318"
    return f"{base.rstrip('/')}/v1/{signal}"


def check_environment() -> None:
    """ValueError, in one line, for a setting ssetape cannot follow."""
    for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        value = os.environ.get(name, "").strip()
        if value and value != PROTOCOL:
            raise ValueError(f"{name}={value}: ssetape sends OTLP over HTTP only ({PROTOCOL})")
        if value:
            break
    for name in ("OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"):
        value = os.environ.get(name, "").strip()
        if value and (not value.isdigit() or int(value) < 1):
            raise ValueError(f"{name}={value}: not a positive whole number")


def exporting(signal: str) -> bool:
    """Whether ``OTEL_TRACES_EXPORTER`` / ``OTEL_METRICS_EXPORTER`` (``signal``: traces,
    metrics) leaves that signal on: ``none`` turns it off, as in every SDK."""
    return os.environ.get(f"OTEL_{signal.upper()}_EXPORTER", "").strip().lower() != "none"


def _size(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else default


@dataclass(frozen=True, slots=True)
class SpanTotals:
    made: int = 0  # spans made and queued for export
    sent: int = 0  # accepted by the collector
    dropped: int = 0  # not made: the queue was full (the collector kept up too slowly)
    failed: int = 0  # refused by the collector, or not sent after the exporter's retries
    pending: int = 0  # made and not yet handed to the exporter

    @property
    def lost(self) -> int:
        return self.dropped + self.failed + self.pending


class _Counted(SpanExporter):
    """The OTLP exporter, counting what it is handed and what the collector took."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self.taken = self.sent = self.failed = 0
        self.room = threading.Condition()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self.room:
            self.taken += len(spans)
            self.room.notify_all()
        try:
            result = self.inner.export(spans)
        except Exception:
            result = SpanExportResult.FAILURE
        with self.room:
            if result is SpanExportResult.SUCCESS:
                self.sent += len(spans)
            else:
                self.failed += len(spans)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


class SpanSink:
    """Makes the span of each stored exchange and queues it for export; any thread."""

    def __init__(self, exporter: SpanExporter | None = None, *, queue: int | None = None) -> None:
        self.queue = queue or _size("OTEL_BSP_MAX_QUEUE_SIZE", DEFAULT_QUEUE)
        batch = min(_size("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", DEFAULT_BATCH), self.queue)
        self.content = capture_content()
        self.endpoint = endpoint()
        self._exporter = _Counted(exporter or OTLPSpanExporter())
        self.provider = TracerProvider(resource=resource(), shutdown_on_exit=False)
        self.provider.add_span_processor(
            BatchSpanProcessor(
                self._exporter, max_queue_size=self.queue, max_export_batch_size=batch
            )
        )
        self.tracer = self.provider.get_tracer("ssetape", __version__)
        self._made = self._dropped = 0
        self._closed = False

    def send(self, x: StoredExchange, *, wait: bool = False) -> bool:
        """Queue the span of ``x``; False if it was dropped (the queue full and ``wait``
        False, or the sink closed) or has none (no start time, or not sampled)."""
        spec = describe(x, content=self.content)
        if spec is None:
            return False
        room = self._exporter.room
        with room:
            while not self._closed and self._made - self._exporter.taken >= self.queue:
                if not wait:
                    self._dropped += 1
                    return False
                room.wait(1.0)
            if self._closed:
                self._dropped += 1
                return False
            if not emit(self.tracer, spec):
                return False
            self._made += 1
        return True

    def totals(self) -> SpanTotals:
        e = self._exporter
        with e.room:
            return SpanTotals(
                self._made, e.sent, self._dropped, e.failed, max(self._made - e.taken, 0)
            )

    def close(self, timeout: float = 5.0) -> SpanTotals:
        """Send what is queued (for ``timeout`` seconds at most), then stop."""
        with self._exporter.room:
            self._closed = True
            self._exporter.room.notify_all()
        self.provider.force_flush(int(timeout * 1000))
        self.provider.shutdown()
        return self.totals()


def resource() -> Resource:
    """The service: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, else ``ssetape``."""
    found = Resource.create({SERVICE_VERSION: __version__})
    if str(found.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        found = found.merge(Resource({SERVICE_NAME: SERVICE}))
    return found
