"""The span of a stored exchange (ssetape.telemetry.spans), its stalls (recording.stored), and
the sink that queues spans for export without ever waiting on a live stream's behalf
(ssetape.telemetry.otlp), with the SDK's in-memory exporter."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Sequence

import orjson
import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otlp extra (opentelemetry-sdk)")

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from ssetape.recording.protocol import StoredExchange
from ssetape.recording.stored import MAX_STALLS, STALL_US, stalls_of
from ssetape.telemetry.otlp import SpanSink, check_environment
from ssetape.telemetry.spans import FIRST_CHUNK, STALL, describe

T0 = 1_780_000_000_123_456  # µs since the epoch
DONE = StoredExchange(
    "messages", "claude-x", "completed", None, 200, "completed", "api.anthropic.com", 443,
    3_000_000, 400_000, 12, 34, [0] * 15, 0, uid="u" * 32, started_us=T0, ttfb_us=150_000,
    gap_max_us=1_500_000, stream=True, reason="end_turn", findings=2,
    stalls=[[900_000, 1_500_000]], stall_count=1, request_text="PROMPT", output_text="ANSWER",
)  # fmt: skip


def test_a_completed_stream_is_a_client_span_at_its_stored_times() -> None:
    spec = describe(DONE)
    assert spec is not None
    assert spec.name == "chat claude-x"
    assert (spec.start_ns, spec.end_ns) == (T0 * 1000, (T0 + 3_000_000) * 1000)
    a = spec.attributes
    assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.provider.name"] == "anthropic"
    assert a["gen_ai.request.model"] == a["gen_ai.response.model"] == "claude-x"
    assert a["gen_ai.usage.input_tokens"] == 12 and a["gen_ai.usage.output_tokens"] == 34
    assert a["gen_ai.response.finish_reasons"] == ["end_turn"]
    assert a["gen_ai.response.time_to_first_chunk"] == 0.4
    assert a["server.address"] == "api.anthropic.com" and a["server.port"] == 443
    assert a["ssetape.exchange.uid"] == "u" * 32 and a["ssetape.findings"] == 2
    assert a["ssetape.ttft_us"] == 400_000 and a["ssetape.gap_max_us"] == 1_500_000
    assert "error.type" not in a and spec.error == ""
    assert [(e.name, e.time_ns) for e in spec.events] == [
        (FIRST_CHUNK, (T0 + 400_000) * 1000),
        (STALL, (T0 + 900_000) * 1000),
    ]
    # No prompt, no output: not opted in.
    assert not any(k.startswith(("gen_ai.input", "gen_ai.output")) for k in a)
    assert "PROMPT" not in orjson.dumps(a).decode()


def test_a_failure_has_its_error_type_and_no_finish_reason() -> None:
    cut = dataclasses.replace(DONE, outcome="cut", reason="no terminal event", fault="provider")
    spec = describe(cut)
    assert spec is not None and spec.error == "cut"
    assert spec.attributes["error.type"] == "cut" and spec.attributes["ssetape.fault"] == "provider"
    assert "gen_ai.response.finish_reasons" not in spec.attributes
    http = dataclasses.replace(DONE, outcome="http_error", status=429, reason="rate_limit_error")
    spec = describe(http)
    assert spec is not None and spec.attributes["error.type"] == "http_error"
    assert "gen_ai.response.model" not in spec.attributes
    # Not analysed (its knowledge not saved): judged by its transport, named by operation.
    bare = StoredExchange(None, None, None, None, None, "failed", "h", None, 5, None, None,
                          None, [], 0, started_us=T0)  # fmt: skip
    spec = describe(bare)
    assert spec is not None and spec.name == "unknown" and spec.attributes["error.type"] == "failed"
    assert describe(dataclasses.replace(DONE, started_us=None)) is None


def test_content_only_when_asked() -> None:
    spec = describe(DONE, content=True)
    assert spec is not None
    [prompt] = orjson.loads(str(spec.attributes["gen_ai.input.messages"]))
    assert prompt == {"role": "user", "parts": [{"type": "text", "content": "PROMPT"}]}
    [answer] = orjson.loads(str(spec.attributes["gen_ai.output.messages"]))
    assert answer["parts"][0]["content"] == "ANSWER" and answer["finish_reason"] == "end_turn"


def test_stalls_are_the_longest_gaps_over_the_threshold_in_stream_order() -> None:
    assert stalls_of([(0, STALL_US - 1), (10, 5)]) == ([], 0)
    gaps = [(i * 10, STALL_US + i) for i in range(MAX_STALLS + 5)]
    stalls, count = stalls_of([(5, STALL_US), *gaps])
    assert count == MAX_STALLS + 6
    assert stalls == [[start, us] for start, us in gaps[5:]]  # the shortest left out
    assert [s[0] for s in stalls] == sorted(s[0] for s in stalls)


def test_the_sdk_makes_the_span_as_described() -> None:
    memory = InMemorySpanExporter()
    sink = SpanSink(memory)
    assert sink.send(DONE)
    totals = sink.close()
    assert (totals.made, totals.sent, totals.lost) == (1, 1, 0)
    [span] = memory.get_finished_spans()
    assert span.name == "chat claude-x" and span.kind is SpanKind.CLIENT
    assert (span.start_time, span.end_time) == (T0 * 1000, (T0 + 3_000_000) * 1000)
    assert [(e.name, e.timestamp) for e in span.events] == [
        (FIRST_CHUNK, (T0 + 400_000) * 1000),
        (STALL, (T0 + 900_000) * 1000),
    ]
    assert span.resource.attributes["service.name"] == "ssetape"
    memory = InMemorySpanExporter()  # the first one was shut down with its sink
    failed = SpanSink(memory)
    failed.send(dataclasses.replace(DONE, outcome="error", reason="overloaded_error"))
    failed.close()
    [span] = memory.get_finished_spans()
    assert span.status.status_code is StatusCode.ERROR


class Stuck(SpanExporter):
    """A collector that takes its time: every export waits for ``go``."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.got = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.go.wait(30)
        self.got += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def test_a_stuck_collector_drops_and_counts_spans_and_never_makes_a_stream_wait() -> None:
    stuck = Stuck()
    sink = SpanSink(stuck, queue=4)
    slowest = 0.0
    for _ in range(50):
        began = time.perf_counter()
        sink.send(DONE)
        slowest = max(slowest, time.perf_counter() - began)
    assert slowest < 0.5  # a few µs each; never a wait for the collector
    t = sink.totals()
    assert t.made + t.dropped == 50 and t.dropped >= 50 - 2 * 4
    stuck.go.set()
    t = sink.close()
    assert stuck.got == t.sent == t.made and t.lost == t.dropped


def test_an_export_of_the_store_waits_for_room_and_loses_nothing() -> None:
    stuck = Stuck()
    sink = SpanSink(stuck, queue=4)
    threading.Timer(0.3, stuck.go.set).start()
    assert all(sink.send(DONE, wait=True) for _ in range(50))
    t = sink.close()
    assert stuck.got == t.sent == 50 and t.lost == 0


def test_spans_the_sampler_leaves_out_are_not_counted_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    memory = InMemorySpanExporter()
    sink = SpanSink(memory, queue=2)
    assert not any(sink.send(DONE) for _ in range(10))
    assert sink.close().lost == 0 and not memory.get_finished_spans()


def test_settings_ssetape_cannot_follow_are_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    check_environment()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    with pytest.raises(ValueError, match=r"OTEL_EXPORTER_OTLP_PROTOCOL=grpc: .*http/protobuf"):
        check_environment()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
    check_environment()  # the traces' own setting wins
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "many")
    with pytest.raises(ValueError, match="OTEL_BSP_MAX_QUEUE_SIZE"):
        check_environment()
