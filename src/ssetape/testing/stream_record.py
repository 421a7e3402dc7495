"""What a test's streams were, as the ``ssetape`` fixture gives them: ``ssetape.exchanges()``.

Each :class:`StreamRecord` is one exchange the test was served from its cassette (or, while
recording, recorded), with the stream knowledge the analysis stored: API, model, outcome,
usage, timing, findings, tool calls, text. Its events are read on demand from the test's
private store, a page at a time, while the test runs (the store goes when the test ends).

The checks a test makes on them, one line each, are :mod:`ssetape.testing.stream_checks`.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import TYPE_CHECKING, Any

import orjson

from ssetape.analysis.content_events import ContentEvents
from ssetape.analysis.findings import NOTES
from ssetape.replay.request_index import Miss, RequestIndex
from ssetape.vocabulary import ExchangeState

# The store's layers load SQLAlchemy: only a test that reads its streams pays for them.
if TYPE_CHECKING:
    from ssetape.storage.models import Exchange
    from ssetape.storage.queries import Queries

__all__ = [
    "Gaps", "ServedIndex", "StreamEvent", "StreamFinding", "StreamRecord", "ToolCall", "Usage",
    "read_records", "recorded_ids",
]  # fmt: skip

EVENTS_LIMIT = 10_000  # events() gives at most this many unless told otherwise
_SETTLE = 0.2  # s a recording proxy gets to store what it has just forwarded
_WAIT = 5.0  # s at most for the exchanges it is still storing


def _ms(us: int | None) -> float | None:
    return None if us is None else us / 1000


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts as the provider reported them (None: not reported)."""

    input_tokens: int | None
    output_tokens: int | None
    total_tokens: int | None
    cache_read_tokens: int | None
    cache_write_tokens: int | None
    reasoning_tokens: int | None

    @property
    def present(self) -> bool:
        """Whether the stream carried usage at all (a usage chunk, message_delta, ...)."""
        return self.input_tokens is not None or self.output_tokens is not None


@dataclass(frozen=True, slots=True)
class Gaps:
    """Pauses between the events that carried content, in ms (None: fewer than two)."""

    median_ms: float | None
    p95_ms: float | None
    max_ms: float | None


@dataclass(frozen=True, slots=True)
class StreamFinding:
    """A protocol finding: its code, the event it is about (None: the stream as a whole)."""

    code: str
    seq: int | None
    detail: str


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    arguments: str
    id: str | None = None

    def json(self) -> Any:
        """The arguments parsed (raises ValueError if they are not JSON)."""
        try:
            return orjson.loads(self.arguments)
        except orjson.JSONDecodeError as e:
            raise ValueError(f"tool call {self.name}: arguments are not JSON: {e}") from None


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One stored event: ``name`` is its SSE event name, else its data's ``type`` or
    ``object`` (``chat.completion.chunk``), ``[DONE]``, ``comment`` or ``chunk``."""

    seq: int
    offset_ms: float
    name: str
    data: str | None

    def where(self) -> str:
        """How a failed check names it: ``event #41 (response.output_text.delta at 2101.7 ms)``."""
        return f"event #{self.seq} ({self.name} at {self.offset_ms:.1f} ms)"


def event_name(event: str | None, data: str | None, raw: bytes = b"") -> str:
    if event and event != "message":
        return event
    if data is None:
        return "comment" if bytes(raw[:1]) == b":" else "chunk"
    if data == "[DONE]":
        return data
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return "data"
    if isinstance(obj, dict):
        for key in ("type", "object"):
            if isinstance(obj.get(key), str) and obj[key]:
                return str(obj[key])[:80]
    return "data"


@dataclass(frozen=True, slots=True)
class _Source:
    """Where a record's events are read from, and what re-reading them needs."""

    queries: Queries
    exchange_id: int
    content: Callable[[], ContentEvents]  # a reader of which events carried content


@dataclass(frozen=True, slots=True)
class StreamRecord:
    """One exchange of this test, as the analysis knows it. Times are in milliseconds from
    the moment the whole request was sent (as recorded: replay speed changes none)."""

    number: int  # its place among the test's exchanges, from 1
    method: str
    path: str
    host: str
    status: int | None
    state: str
    api: str | None
    model: str | None
    outcome: str | None
    reason: str | None
    usage: Usage
    ttfb_ms: float | None
    ttft_ms: float | None
    gaps: Gaps
    duration_ms: float | None
    tokens_per_s: float | None
    findings: tuple[StreamFinding, ...]
    tool_calls: tuple[ToolCall, ...]
    output_text: str
    event_count: int
    cassette_line: int | None  # None: recorded by this test
    _source: _Source = field(repr=False, compare=False)

    @property
    def label(self) -> str:
        """``exchange #1 POST /v1/chat/completions (cassette line 2)``: how messages name it."""
        where = f" (cassette line {self.cassette_line})" if self.cassette_line else ""
        return f"exchange #{self.number} {self.method} {self.path}{where}"

    # -- events, read on demand ---------------------------------------------------------

    def iter_events(self) -> Iterator[StreamEvent]:
        """Every event in order, read a page at a time (while the test runs)."""
        src = self._source
        for seq, offset_us, event, data, raw in src.queries.event_rows(src.exchange_id):
            yield StreamEvent(seq, offset_us / 1000, event_name(event, data, raw), data)

    def events(self, limit: int | None = EVENTS_LIMIT) -> list[StreamEvent]:
        """The first ``limit`` events (all with None)."""
        return list(islice(self.iter_events(), limit))

    def event(self, seq: int) -> StreamEvent | None:
        src = self._source
        page = src.queries.events_page(src.exchange_id, after_seq=seq - 1, stop_seq=seq + 1)
        return next((StreamEvent(e.seq, e.offset_us / 1000, event_name(e.event, e.data, e.raw),
                                 e.data) for e in page), None)  # fmt: skip

    def content_events(self) -> Iterator[StreamEvent]:
        """The events that carried content (text, reasoning, tool arguments, refusal): those
        TTFT and the gaps are measured on, as the analysis chose them."""
        src = self._source
        reader = src.content()
        rows = src.queries.event_rows(src.exchange_id)
        for seq, offset_us, event, data, raw in rows:
            if reader.carried(seq, offset_us, event, data, bytes(raw)):
                yield StreamEvent(seq, offset_us / 1000, event_name(event, data, raw), data)


def _record(
    number: int, x: Exchange, queries: Queries, findings: Sequence[StreamFinding],
    line: int | None,
) -> StreamRecord:  # fmt: skip
    details = x.details or {}
    calls = tuple(
        ToolCall(str(c.get("name") or ""), str(c.get("arguments") or ""), c.get("id"))
        for c in details.get("tool_calls") or []
        if isinstance(c, dict)
    )
    # The analysis itself tells which events carry content (analysis.content_events), so
    # the checks measure TTFT and gaps on exactly the events the stored figures came from.
    source = _Source(queries, x.id, functools.partial(ContentEvents.of, x))
    usage = Usage(x.input_tokens, x.output_tokens, x.total_tokens, x.cache_read_tokens,
                  x.cache_write_tokens, x.reasoning_tokens)  # fmt: skip
    gaps = Gaps(_ms(x.gap_median_us), _ms(x.gap_p95_us), _ms(x.gap_max_us))
    return StreamRecord(
        number=number, method=x.method, path=x.path, host=x.host, status=x.status,
        state=x.state, api=x.api, model=x.model, outcome=x.outcome, reason=x.outcome_reason,
        usage=usage, ttfb_ms=_ms(x.ttfb_us), ttft_ms=_ms(x.ttft_us), gaps=gaps,
        duration_ms=_ms(x.duration_us), tokens_per_s=x.tokens_per_s, findings=tuple(findings),
        tool_calls=calls, output_text=x.output_text or "", event_count=x.event_count,
        cassette_line=line, _source=source,
    )  # fmt: skip


class ServedIndex(RequestIndex):
    """The replay index that remembers which recordings it served, in order: the streams the
    test saw (``TapeSession.exchanges``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.served: list[int] = []

    def lookup(self, *args: Any, **kwargs: Any) -> int | Miss | None:
        found = super().lookup(*args, **kwargs)
        if isinstance(found, int):
            self.served.append(found)  # list.append is atomic: lookups run in threads too
        return found


def read_records(
    queries: Queries, ids: Sequence[int], lines: Mapping[int, int]
) -> list[StreamRecord]:
    """The records of these exchanges, in this order (``lines``: cassette line by id)."""
    by_id = {x.id: x for x in queries.exchanges_by_id(list(dict.fromkeys(ids)))}
    out: list[StreamRecord] = []
    for xid in dict.fromkeys(ids):
        x = by_id.get(xid)
        if x is None:
            continue
        # A stream's findings are the rules it broke; a note (an API no rules model) is none.
        found = [StreamFinding(f.code, f.event_seq, f.detail) for f in queries.findings(xid)
                 if f.code not in NOTES]  # fmt: skip
        out.append(_record(len(out) + 1, x, queries, found, lines.get(xid)))
    return out


def recorded_ids(queries: Queries, after_id: int, *, wait: float = _WAIT) -> list[int]:
    """The exchanges recorded after ``after_id``, once the recording proxy has stored and
    analysed them: it stores what it forwards a moment after the client has it."""
    settle = time.monotonic() + _SETTLE
    deadline = time.monotonic() + wait
    while True:
        rows = queries.exchanges_after(after_id, limit=10_000)
        done = all(x.state != ExchangeState.RECORDING and x.analysis_version for x in rows)
        now = time.monotonic()
        if (done and now >= settle) or now >= deadline:
            return [x.id for x in rows]
        time.sleep(0.05)
