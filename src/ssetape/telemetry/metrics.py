"""The recorder's Prometheus metrics: its own registry, fed by what its store holds.

Every exchange figure comes from the recording process's ``STORED`` report, sent once an
exchange's end and analysis are committed, with the values it saved: ``/metrics`` counts
what ``ssetape stats`` reads from the store (docs/FIGURES.md defines each figure). The
store's work comes from its ``WRITES`` reports; the recorder's health is read at each scrape
(:class:`~ssetape.telemetry.recorder_state.RecorderState`). Reports are folded in on the
thread that reads them, never on the proxy's event loop; a scrape reads on the admin
server's thread.
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import choose_encoder

from ssetape.recording.protocol import Report, StoredExchange, StoreWrites
from ssetape.telemetry.conventions import (
    DURATION,
    SECONDS_BOUNDS,
    TIME_PER_OUTPUT_CHUNK,
    TIME_TO_FIRST_CHUNK,
    TOKEN_BOUNDS,
    TOKEN_USAGE,
)
from ssetape.telemetry.histogram import BinnedHistogram
from ssetape.telemetry.labels import Labels
from ssetape.telemetry.recorder_state import RecorderState, Sources
from ssetape.vocabulary import is_failed

__all__ = ["WRITE_BOUNDS", "RecorderMetrics"]

# Seconds one store transaction takes: SQLite commits in a millisecond, a PostgreSQL batch
# over a network in tens of them, a store retrying an outage in seconds.
WRITE_BOUNDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class RecorderMetrics:
    """``hear`` is a link's listener (``recording.child.Listeners``); ``render`` a scrape."""

    def __init__(self, sources: Sources, *, top_models: int = 20, hosts: bool = False) -> None:
        self.registry = CollectorRegistry()
        self.labels = Labels(top=top_models, hosts=hosts)
        r = self.registry
        self.exchanges = Counter(
            "ssetape_exchanges",
            "Exchanges ended and stored, by API, outcome (docs/FIGURES.md), whether it failed "
            "and who failed (vocabulary.Fault).",
            ["api", "outcome", "failed", "fault"],
            registry=r,
        )
        self.last_stored = Gauge(
            "ssetape_last_exchange_timestamp_seconds",
            "When the latest exchange was stored (Unix time); at start, when metrics began.",
            registry=r,
        )
        self.last_stored.set(time.time())
        self.writes = Histogram(
            "ssetape_store_write_duration_seconds",
            "Store transactions of recorded rows, commit included.",
            buckets=WRITE_BOUNDS,
            registry=r,
        )
        self.queued = Gauge(
            "ssetape_store_queue_rows",
            "Rows waiting for the store (taken in, not yet committed or dropped).",
            registry=r,
        )
        self.stream_bytes = Counter(
            "ssetape_stream_bytes",
            "Bytes of streamed bodies the recording process took to parse and store.",
            registry=r,
        )
        names = self.labels.names
        self.duration = BinnedHistogram(
            DURATION,
            "GenAI operation duration: from the whole request to the response's end.",
            names("error_type", "ssetape_fault"),
            SECONDS_BOUNDS,
        )
        self.ttft = BinnedHistogram(
            TIME_TO_FIRST_CHUNK,
            "Time to the first content event of a stream (ssetape's TTFT).",
            names(),
            SECONDS_BOUNDS,
        )
        self.per_chunk = BinnedHistogram(
            TIME_PER_OUTPUT_CHUNK,
            "Time between consecutive content events of a stream (ssetape's gaps).",
            names(),
            SECONDS_BOUNDS,
        )
        self.tokens = BinnedHistogram(
            TOKEN_USAGE,
            "Tokens an exchange used, as its provider reported them.",
            names("gen_ai_token_type"),
            TOKEN_BOUNDS,
        )
        for histogram in (self.duration, self.ttft, self.per_chunk, self.tokens):
            r.register(histogram)
        r.register(RecorderState(sources))

    def hear(self, kind: Report, value: Any) -> None:
        if kind is Report.STORED:
            for x in value:
                self.stored(x)
            if value:
                self.last_stored.set(time.time())
        elif kind is Report.WRITES:
            self.wrote(value)

    def stored(self, x: StoredExchange) -> None:
        failed = is_failed(x.outcome, x.status, x.state)
        outcome = x.outcome or "unanalysed"
        self.exchanges.labels(x.api or "", outcome, str(failed).lower(), x.fault or "").inc()
        genai = self.labels.genai
        if x.duration_us is not None:
            labels = genai(x, self.labels.error(x), x.fault or "")
            self.duration.observe(labels, x.duration_us / 1e6)
        if x.ttft_us is not None:
            self.ttft.observe(genai(x), x.ttft_us / 1e6)
        if any(x.gaps):
            self.per_chunk.add(genai(x), x.gaps, x.gaps_us / 1e6)
        for kind, count in (("input", x.input_tokens), ("output", x.output_tokens)):
            if count is not None:
                self.tokens.observe(genai(x, kind), count)

    def wrote(self, w: StoreWrites) -> None:
        for seconds in w.seconds:
            self.writes.observe(seconds)
        self.queued.set(w.queued)
        if w.stream_bytes > 0:
            self.stream_bytes.inc(w.stream_bytes)

    def render(self, accept: str) -> tuple[bytes, str]:
        """The exposition a scrape asked for (its Accept header): body and content type."""
        encoder, content_type = choose_encoder(accept)
        return encoder(self.registry), content_type
