"""One OpenTelemetry span per stored exchange, per the GenAI semantic conventions: the one
definition that `ssetape record --otlp` (from each ``STORED`` report) and `ssetape export
--otlp` (from each stored row, :func:`ssetape.telemetry.span_rows.stored_of`) both use.

The span is what the store holds, at the recorded times: it starts at ``started_at`` (the
moment the proxy had the whole request, every offset's zero) and ends ``duration_us`` later;
its events are the first content event (TTFT) and each stall (a gap between content events
of ``recording.stored.STALL_US`` or more, the longest ``MAX_STALLS``), at their offsets.
Named ``{gen_ai.operation.name} {gen_ai.request.model}``, kind CLIENT (the call a client made
through the recorder), status ERROR when the exchange failed (``vocabulary.is_failed``), with
``error.type`` its outcome as the metrics say it. Beside the conventions' attributes, ssetape's
own figures under ``ssetape.*`` (docs/FIGURES.md). No prompt or output unless the user opted
in (``ssetape.recording.content_capture``), and then the stored text, redacted as the store is.

:func:`describe` says what the span is (plain values, tested without an SDK); :func:`emit`
makes it with an OpenTelemetry tracer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import orjson

from ssetape.recording.protocol import StoredExchange
from ssetape.telemetry.conventions import error_type, operation_name, provider_name
from ssetape.vocabulary import Outcome, is_failed

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

__all__ = ["FIRST_CHUNK", "STALL", "SpanSpec", "describe", "emit"]

Value = str | int | float | bool | list[str]

FIRST_CHUNK = "ssetape.first_chunk"  # the first content event: TTFT
STALL = "ssetape.stall"  # a pause between content events, at its start
# The outcomes whose outcome_reason is the provider's finish reason (stop, length, end_turn,
# STOP, ...); a failed one's reason is an error code, not why the model stopped.
_FINISHED = frozenset({Outcome.COMPLETED, Outcome.INCOMPLETE, Outcome.REFUSED})


@dataclass(frozen=True, slots=True)
class SpanEvent:
    name: str
    time_ns: int
    attributes: dict[str, Value]


@dataclass(frozen=True, slots=True)
class SpanSpec:
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Value]
    events: list[SpanEvent] = field(default_factory=list)
    error: str = ""  # error.type of a failed exchange, "" otherwise


def describe(x: StoredExchange, *, content: bool = False) -> SpanSpec | None:
    """The span of one stored exchange; None for one without a start time (not stored with
    one: nothing to place it at)."""
    if x.started_us is None:
        return None
    start = x.started_us * 1000
    operation = operation_name(x.api)
    a: dict[str, Value] = {
        "gen_ai.operation.name": operation,
        "gen_ai.provider.name": provider_name(x.api, x.host),
        "server.address": x.host,
    }
    if x.port is not None:
        a["server.port"] = x.port
    if x.model:
        # ssetape stores one model: the one the response named, else the request's.
        a["gen_ai.request.model"] = x.model
        if x.outcome is not None and x.outcome not in (Outcome.NO_RESPONSE, Outcome.HTTP_ERROR):
            a["gen_ai.response.model"] = x.model
    if x.outcome in _FINISHED and x.reason:
        a["gen_ai.response.finish_reasons"] = [x.reason]
    for key, value in (
        ("gen_ai.usage.input_tokens", x.input_tokens),
        ("gen_ai.usage.output_tokens", x.output_tokens),
        ("http.response.status_code", x.status),
        ("gen_ai.request.stream", x.stream),
    ):
        if value is not None:
            a[key] = value
    if x.ttft_us is not None:
        a["gen_ai.response.time_to_first_chunk"] = x.ttft_us / 1e6
    error = error_type(x) if is_failed(x.outcome, x.status, x.state) else ""
    if error:
        a["error.type"] = error
    a |= _own(x)
    if content:
        a |= _content(x)
    events = []
    if x.ttft_us is not None:
        events.append(
            SpanEvent(FIRST_CHUNK, start + x.ttft_us * 1000, {"ssetape.ttft_us": x.ttft_us})
        )
    for at, us in x.stalls or ():
        events.append(SpanEvent(STALL, start + at * 1000, {"ssetape.gap_us": us}))
    name = f"{operation} {x.model}" if x.model else operation
    end = start + max(x.duration_us or 0, 0) * 1000
    return SpanSpec(name, start, end, a, events, error)


def _own(x: StoredExchange) -> dict[str, Value]:
    """ssetape's figures of the exchange, named as the store names them (docs/FIGURES.md)."""
    own: dict[str, Value] = {
        "ssetape.exchange.uid": x.uid,
        "ssetape.state": x.state,
        "ssetape.findings": x.findings,
        "ssetape.stalls": x.stall_count,
    }
    for key, value in (
        ("ssetape.api", x.api),
        ("ssetape.outcome", x.outcome),
        ("ssetape.outcome_reason", x.reason),
        ("ssetape.fault", x.fault),
        ("ssetape.ttfb_us", x.ttfb_us),
        ("ssetape.ttft_us", x.ttft_us),
        ("ssetape.gap_max_us", x.gap_max_us),
        ("ssetape.duration_us", x.duration_us),
    ):
        if value is not None:
            own[key] = value
    return own


def _content(x: StoredExchange) -> dict[str, Value]:
    """The conventions' gen_ai.input.messages / gen_ai.output.messages (JSON), each one text
    part: the prompt's text as ssetape stores it (every message's text, in order), and the
    output text."""
    out: dict[str, Value] = {}
    if x.request_text:
        parts = [{"type": "text", "content": x.request_text}]
        out["gen_ai.input.messages"] = orjson.dumps([{"role": "user", "parts": parts}]).decode()
    if x.output_text:
        message: dict[str, object] = {
            "role": "assistant",
            "parts": [{"type": "text", "content": x.output_text}],
        }
        if x.outcome in _FINISHED and x.reason:
            message["finish_reason"] = x.reason
        out["gen_ai.output.messages"] = orjson.dumps([message]).decode()
    return out


def emit(tracer: Tracer, spec: SpanSpec) -> bool:
    """Make and end the span (the tracer's processor queues it for export); False if the
    sampler left it out (``OTEL_TRACES_SAMPLER``)."""
    from opentelemetry.trace import SpanKind, StatusCode

    span = tracer.start_span(
        spec.name, kind=SpanKind.CLIENT, attributes=spec.attributes, start_time=spec.start_ns
    )
    if not span.is_recording():
        return False
    for event in spec.events:
        span.add_event(event.name, event.attributes, timestamp=event.time_ns)
    if spec.error:
        span.set_status(StatusCode.ERROR, spec.error)
    span.end(end_time=spec.end_ns)
    return True
