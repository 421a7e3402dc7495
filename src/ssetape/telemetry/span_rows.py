"""`ssetape export --otlp`: the spans of exchanges already stored, as the recorder sends them.

Each stored row becomes the :class:`~ssetape.recording.protocol.StoredExchange` the recording
process would have reported for it (:func:`stored_of`), and :mod:`ssetape.telemetry.spans`
makes the span: the same span, a month later. Read through the one query layer, a batch of
exchanges at a time; a stream's events are read (a page at a time) only when its longest gap
says it stalled, to find its stalls as the analysis counts gaps (``ContentEvents``).
"""

from __future__ import annotations

from collections.abc import Callable

from ssetape.analysis.content_events import ContentEvents
from ssetape.recording.content_capture import clipped
from ssetape.recording.protocol import StoredExchange
from ssetape.recording.stored import STALL_US, epoch_us, stalls_of
from ssetape.storage.cassette_rows import CassetteRows, Narrow
from ssetape.storage.models import Exchange
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from ssetape.telemetry.otlp import SpanSink
from ssetape.vocabulary import ExchangeState

__all__ = ["BATCH", "export_spans", "stored_of"]

BATCH = 50  # exchanges read at a time (their bodies with them)


def stored_of(
    x: Exchange, *, findings: int, stalls: tuple[list[list[int]], int], content: bool
) -> StoredExchange:
    """The report the recording process sent when it stored ``x`` (the gaps' buckets apart:
    the metrics', which a span does not carry)."""
    return StoredExchange(
        x.api, x.model, x.outcome, x.fault, x.status, x.state, x.host, x.port, x.duration_us,
        x.ttft_us, x.input_tokens, x.output_tokens, [], 0, uid=x.uid,
        started_us=epoch_us(x.started_at), ttfb_us=x.ttfb_us, gap_max_us=x.gap_max_us,
        stream=x.is_stream if x.status is not None else None, reason=x.outcome_reason,
        findings=findings, stalls=stalls[0], stall_count=stalls[1],
        request_text=clipped(x.request_text) if content else None,
        output_text=clipped(x.output_text) if content else None,
    )  # fmt: skip


def _stalls(queries: Queries, x: Exchange) -> tuple[list[list[int]], int]:
    if x.outcome is None or (x.gap_max_us or 0) < STALL_US:
        return [], 0
    # A session's within its turns: the silence between two is not a stall.
    return stalls_of((g.offset_us - g.us, g.us) for g in ContentEvents.stored_gaps(queries, x))


def export_spans(
    store: Store, narrow: Narrow | None, sink: SpanSink,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[int, int]:  # fmt: skip
    """Queue the span of each exchange ``narrow`` picks, oldest first, waiting for room in
    the queue (nothing dropped); (spans queued, exchanges left out: still recording)."""
    queries = Queries(store)
    ids = CassetteRows(store).ids(narrow, "time")
    queued = skipped = 0
    for start in range(0, len(ids), BATCH):
        batch = ids[start : start + BATCH]
        counts = queries.finding_counts(batch)
        for x in queries.exchanges_by_id(batch):
            if x.state == ExchangeState.RECORDING:
                skipped += 1  # not over: no end to place its span at
                continue
            one = stored_of(
                x, findings=counts.get(x.id, 0), stalls=_stalls(queries, x), content=sink.content
            )
            queued += sink.send(one, wait=True)
        if progress is not None:
            progress(min(start + BATCH, len(ids)), len(ids))
    return queued, skipped
