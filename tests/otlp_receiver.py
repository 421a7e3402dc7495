"""A small OTLP/HTTP receiver for the tests: a stdlib HTTP server on loopback that decodes
each ``POST /v1/traces`` as opentelemetry-proto's ``ExportTraceServiceRequest`` and each
``POST /v1/metrics`` as its ``ExportMetricsServiceRequest`` (the collector's own messages), and
keeps the spans with their resource, the histograms' points, and the raw bodies."""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

WAIT = 60.0


def value_of(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value_of(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


def attributes(kvs: Any) -> dict[str, Any]:
    return {kv.key: value_of(kv.value) for kv in kvs if isinstance(kv, KeyValue)}


@dataclass
class Span:
    name: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[tuple[str, int, dict[str, Any]]]
    status_code: int
    resource: dict[str, Any]


@dataclass
class Point:
    """One histogram data point (cumulative: the last one sent of its attributes counts)."""

    name: str
    unit: str
    attributes: dict[str, Any]
    count: int
    sum: float
    bounds: list[float]


@dataclass
class Receiver:
    url: str
    spans: list[Span] = field(default_factory=list)
    points: list[Point] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, body: bytes) -> None:
        req = ExportTraceServiceRequest()
        req.ParseFromString(body)
        got = []
        for rs in req.resource_spans:
            resource = attributes(rs.resource.attributes)
            for ss in rs.scope_spans:
                for s in ss.spans:
                    events = [
                        (e.name, e.time_unix_nano, attributes(e.attributes)) for e in s.events
                    ]
                    got.append(
                        Span(s.name, s.kind, s.start_time_unix_nano, s.end_time_unix_nano,
                             attributes(s.attributes), events, s.status.code, resource)
                    )  # fmt: skip
        with self.lock:
            self.bodies.append(body)
            self.spans.extend(got)

    def take_metrics(self, body: bytes) -> None:
        req = ExportMetricsServiceRequest()
        req.ParseFromString(body)
        got = [
            Point(m.name, m.unit, attributes(p.attributes), p.count, p.sum, list(p.explicit_bounds))
            for rm in req.resource_metrics
            for sm in rm.scope_metrics
            for m in sm.metrics
            if m.WhichOneof("data") == "histogram"
            for p in m.histogram.data_points
        ]
        with self.lock:
            self.bodies.append(body)
            self.points.extend(got)

    def histograms(self) -> dict[tuple[str, tuple[tuple[str, Any], ...]], Point]:
        """The last point of each histogram and attribute set."""
        with self.lock:
            return {(p.name, tuple(sorted(p.attributes.items()))): p for p in self.points}

    def by_uid(self) -> dict[str, Span]:
        with self.lock:
            return {s.attributes["ssetape.exchange.uid"]: s for s in self.spans}

    def wait_for(self, n: int, timeout: float = WAIT) -> list[Span]:
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                if len(self.spans) >= n:
                    return list(self.spans)
            assert time.monotonic() < deadline, f"{len(self.spans)} span(s), not {n}"
            time.sleep(0.05)


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    receiver: Receiver

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            if self.headers.get("content-encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path == "/v1/traces":
                receiver.take(body)
                answer = ExportTraceServiceResponse().SerializeToString()
            elif self.path == "/v1/metrics":
                receiver.take_metrics(body)
                answer = ExportMetricsServiceResponse().SerializeToString()
            else:
                self.send_response(404)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver = Receiver(f"http://127.0.0.1:{server.server_address[1]}")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
