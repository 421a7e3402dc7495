"""`ssetape record --otlp` end to end: a real recorder in front of the simulator, sending to a
small OTLP/HTTP receiver (tests.otlp_receiver) that decodes opentelemetry-proto's messages.
One span per stored exchange, named and attributed per the GenAI conventions, starting and
ending at the stored times, with the first chunk and a stall as events; no secret and no
prompt text unless the content capture is opted in, and then the store's redacted text.
`ssetape export --otlp` sends the very same spans for the store afterwards."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from ssetape.cli.main import main
from ssetape.recording.stored import epoch_us
from ssetape.simulator.simulator import Simulator
from ssetape.storage.models import Exchange
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from tests.conftest import SSETAPE, Proc

pytest.importorskip("opentelemetry.sdk", reason="the otlp extra (opentelemetry-sdk)")

from ssetape.telemetry.conventions import SECONDS_BOUNDS
from ssetape.telemetry.otlp_meters import DURATION, TOKEN_USAGE
from tests.otlp_receiver import Receiver, Span, otlp_receiver

SECRET = "sk-test-SECRET-4f9a1c"
PROMPT = "PROMPT-MARKER-7d2e"
SYSTEM_SECRET = "SYSTEM-SECRET-91b3"
# (model, path): completed, failed mid-stream, cut, paused 1.5 s (a stall), Anthropic's.
STREAMS = [
    ("gpt-4o-sim-plain", "/v1/chat/completions"),
    ("gpt-4o-sim-error", "/v1/chat/completions"),
    ("gpt-4o-sim-cut", "/v1/chat/completions"),
    ("gpt-4o-sim-pause", "/v1/chat/completions"),
    ("claude-sim-plain", "/v1/messages"),
]
CLIENT = 3  # opentelemetry-proto's Span.SpanKind.SPAN_KIND_CLIENT
STATUS_ERROR = 2


@pytest.fixture(scope="module")
def sim1() -> Iterator[Simulator]:
    """At speed 1: the pause is 1.5 s, a stall."""
    with Simulator(speed=1.0).serve_in_thread() as s:
        yield s


def otel_env(receiver: Receiver, **more: str) -> dict[str, str]:
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_SERVICE_NAME": "ssetape-under-test",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "",
        **more,
    }


def stream(base: str, model: str, path: str) -> None:
    body: dict[str, Any] = {"model": model, "stream": True, "max_tokens": 30}
    body["messages"] = [{"role": "user", "content": f"{PROMPT} {model}"}]
    if path.endswith("/chat/completions"):
        body["stream_options"] = {"include_usage": True}
    else:
        body["system"] = SYSTEM_SECRET
    headers = {"authorization": f"Bearer {SECRET}", "x-api-key": SECRET}
    try:
        with httpx.stream("POST", base + path, json=body, headers=headers, timeout=60) as r:
            for _ in r.iter_bytes():
                pass
    except httpx.RemoteProtocolError:
        assert "cut" in model


def record_streams(proc: Proc, receiver: Receiver) -> list[Span]:
    for model, path in STREAMS:
        stream(proc.url, model, path)
    spans = receiver.wait_for(len(STREAMS))
    assert proc.stop() == 0, proc.log.decode()
    return spans


def stored(db: str) -> list[Exchange]:
    with Store.open(db, create=False) as store:
        return Queries(store).exchanges()


def findings(db: str, exchange_id: int) -> list[Any]:
    with Store.open(db, create=False) as store:
        return Queries(store).findings(exchange_id)


def no_secret(receiver: Receiver, *texts: str) -> None:
    for body in receiver.bodies:
        for text in (SECRET, SYSTEM_SECRET, *texts):
            assert text.encode() not in body


def test_one_span_per_stored_exchange_at_the_stored_times_and_export_sends_the_same(
    sim1: Simulator, ssetape_proc: Callable[..., Proc]
) -> None:
    with otlp_receiver() as live:
        proc = ssetape_proc("record", "--mode", f"reverse:{sim1.url}", "--otlp", env=otel_env(live))
        record_streams(proc, live)
        assert "span(s) sent to " + live.url in proc.log.decode(), proc.log.decode()
    exchanges = stored(proc.db)
    spans = live.by_uid()
    assert len(live.spans) == len(exchanges) == len(STREAMS) == len(spans)
    by_model = {}
    for x in exchanges:
        span = spans[x.uid]
        by_model[x.model] = span
        start = epoch_us(x.started_at) * 1000
        assert x.duration_us is not None
        assert (span.start_ns, span.end_ns) == (start, start + x.duration_us * 1000)
        assert span.kind == CLIENT
        assert span.resource["service.name"] == "ssetape-under-test"
        a = span.attributes
        operation = "chat"
        assert span.name == f"{operation} {x.model}"
        assert a["gen_ai.operation.name"] == operation
        assert a["gen_ai.request.model"] == x.model
        assert a["server.address"] == "127.0.0.1" and a["server.port"] == x.port
        assert a.get("gen_ai.usage.output_tokens") == x.output_tokens
        assert a.get("gen_ai.usage.input_tokens") == x.input_tokens
        assert a["ssetape.outcome"] == x.outcome and a["ssetape.ttft_us"] == x.ttft_us
        assert a["ssetape.ttfb_us"] == x.ttfb_us and a["ssetape.gap_max_us"] == x.gap_max_us
        assert a["ssetape.findings"] == len(findings(proc.db, x.id))
        first = [e for e in span.events if e[0] == "ssetape.first_chunk"]
        assert x.ttft_us is not None and first == [
            ("ssetape.first_chunk", start + x.ttft_us * 1000, {"ssetape.ttft_us": x.ttft_us})
        ]
    plain, error, cut = (by_model[f"gpt-4o-sim-{k}"] for k in ("plain", "error", "cut"))
    assert plain.attributes["gen_ai.provider.name"] == "openai"
    assert plain.attributes["gen_ai.usage.output_tokens"] > 0
    assert plain.attributes["gen_ai.response.finish_reasons"] == ["stop"]
    assert "error.type" not in plain.attributes and plain.status_code != STATUS_ERROR
    for failed, kind in ((error, "error"), (cut, "cut")):
        assert failed.attributes["error.type"] == kind and failed.status_code == STATUS_ERROR
        assert "gen_ai.response.finish_reasons" not in failed.attributes
    assert by_model["claude-sim-plain"].attributes["gen_ai.provider.name"] == "anthropic"
    # The 1.5 s pause is a stall, an event where it began; no other stream stalled.
    paused = by_model["gpt-4o-sim-pause"]
    [(_, at, stall)] = [e for e in paused.events if e[0] == "ssetape.stall"]
    assert stall["ssetape.gap_us"] == paused.attributes["ssetape.gap_max_us"] >= 1_000_000
    assert paused.start_ns < at < paused.end_ns and paused.attributes["ssetape.stalls"] == 1
    assert all(s.attributes["ssetape.stalls"] == 0 for s in spans.values() if s is not paused)
    no_secret(live, PROMPT)
    # The GenAI metrics of the same exchanges, sent at the stop.
    histograms = live.histograms()
    durations = [p for (name, _), p in histograms.items() if name == DURATION]
    assert sum(p.count for p in durations) == len(STREAMS)
    assert {p.unit for p in durations} == {"s"} and durations[0].bounds == list(SECONDS_BOUNDS)
    stored_s = sum(x.duration_us or 0 for x in exchanges) / 1e6
    assert abs(sum(p.sum for p in durations) - stored_s) < 1e-6
    errors: dict[str, int] = {}
    for p in durations:
        kind = p.attributes.get("error.type", "")
        errors[kind] = errors.get(kind, 0) + p.count
    assert errors == {"": 3, "error": 1, "cut": 1}
    tokens = [p for (name, _), p in histograms.items() if name == TOKEN_USAGE]
    for kind, column in (("input", "input_tokens"), ("output", "output_tokens")):
        total = sum(p.sum for p in tokens if p.attributes["gen_ai.token.type"] == kind)
        assert total == sum(getattr(x, column) or 0 for x in exchanges) > 0
    # The store, a month later: the same spans, from the stored rows.
    with otlp_receiver() as again:
        out = subprocess.run(
            [SSETAPE, "export", "--db", proc.db, "--otlp", "--since", "1d"],
            capture_output=True, env={**os.environ, **otel_env(again)}, timeout=120,
        )  # fmt: skip
        assert out.returncode == 0, out
        assert f"sent {len(STREAMS)} span(s)".encode() in out.stderr, out.stderr
        exported = again.by_uid()
    assert len(again.spans) == len(STREAMS)
    for uid, span in spans.items():
        other = exported[uid]
        assert (other.name, other.start_ns, other.end_ns) == (span.name, span.start_ns, span.end_ns)
        assert other.attributes == span.attributes
        assert other.events == span.events and other.status_code == span.status_code
    no_secret(again, PROMPT)
    # A collector that is down: the export says so, and fails.
    down = {**os.environ, **otel_env(again), "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
            "OTEL_EXPORTER_OTLP_TIMEOUT": "1"}  # fmt: skip
    out = subprocess.run(
        [SSETAPE, "export", "--db", proc.db, "--otlp"], capture_output=True, env=down, timeout=120
    )
    assert (
        out.returncode == 1
        and f"{len(STREAMS)} of {len(STREAMS)} span(s) not sent".encode() in (out.stderr)
    ), out


def test_export_takes_a_file_or_otlp(tmp_path: Path) -> None:
    db = str(tmp_path / "none.db")
    for args in ([], ["--otlp", "-o", str(tmp_path / "x.jsonl")]):
        r = CliRunner().invoke(main, ["export", "--db", db, *args])
        assert r.exit_code == 2 and "give -o/--output FILE or --otlp" in r.output, r.output


def test_prompts_only_when_opted_in_and_redacted_as_stored(
    sim1: Simulator, ssetape_proc: Callable[..., Proc]
) -> None:
    with otlp_receiver() as live:
        env = otel_env(live, OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="true")
        proc = ssetape_proc(
            "record", "--mode", f"reverse:{sim1.url}", "--otlp", "--redact-field", "system",
            env=env,
        )  # fmt: skip
        stream(proc.url, "claude-sim-plain", "/v1/messages")
        [span] = live.wait_for(1)
        assert proc.stop() == 0, proc.log.decode()
    [x] = stored(proc.db)
    prompt = span.attributes["gen_ai.input.messages"]
    assert f"{PROMPT} claude-sim-plain" in prompt
    assert x.request_text is not None and SYSTEM_SECRET not in x.request_text
    assert x.output_text and x.output_text[:40] in span.attributes["gen_ai.output.messages"]
    no_secret(live)
