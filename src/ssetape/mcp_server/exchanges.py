"""Exchanges for an agent: a page of summaries, and one exchange in detail with its events."""

from __future__ import annotations

import math
from typing import Any

from ssetape.analysis.turns import SessionTurns
from ssetape.mcp_server import texts
from ssetape.mcp_server.paging import (
    MAX_PAGE_BYTES,
    PAGE_BYTES,
    Page,
    ToolError,
    budget_of,
    limit_of,
    since_of,
)
from ssetape.mcp_server.texts import clip
from ssetape.storage.exchange_heads import ExchangeHead, ExchangeHeads
from ssetape.storage.filters import RANGES, ExchangeFilter
from ssetape.storage.models import Event, Exchange
from ssetape.storage.queries import Queries
from ssetape.storage.sorted_pages import NEWEST, Sort
from ssetape.storage.text_matches import TextMatch, TextMatches
from ssetape.storage.turns import TurnReads
from ssetape.views.documents import knowledge, summary
from ssetape.views.ws_timeline import TURNS_SHOWN, is_session
from ssetape.vocabulary import fault_choices, outcome_choices, parse_fault, parse_outcome

__all__ = [
    "EVENTS_MAX",
    "FAULTS",
    "OUTCOMES",
    "RANGE_ARGS",
    "event_doc",
    "fault_of",
    "get_exchange",
    "list_exchanges",
    "lookup",
    "outcome_of",
]

EVENTS_MAX = 200
# What an outcome filter takes: every outcome, then "failed" (all those counted as failed).
OUTCOMES = tuple(outcome_choices())
# What a fault argument takes: every fault, then "any".
FAULTS = tuple(fault_choices())
# Characters of one event's data handed out.
EVENT_TEXT = 1000
_LONG_TEXTS = ("output_text", "refusal_text", "reasoning_text")


def lookup(queries: Queries, id_or_uid: str | int) -> Exchange:
    """The exchange an agent names as any tool gave it: its id (a number, or the string of
    one, as tools took it before) or its uid."""
    key = id_or_uid.strip() if isinstance(id_or_uid, str) else id_or_uid
    # An int the store cannot hold names nothing (PostgreSQL would refuse it).
    valid = 0 < key < 2**63 if isinstance(key, int) else key != ""
    x = queries.exchange(key) if valid else None
    if x is None:
        raise ToolError(f"no exchange {str(id_or_uid)[:40]!r} in this store")
    return x


def outcome_of(outcome: str | None) -> str | None:
    """``outcome`` if a filter takes it (the tools' schemas list the choices; this names them
    to a client that sends another anyway, rather than answer with nothing found)."""
    if outcome is None:
        return None
    try:
        return parse_outcome(outcome)
    except ValueError as e:
        raise ToolError(str(e)) from None


def fault_of(fault: str | None) -> str | None:
    """``fault`` if a fault argument takes it; a ToolError naming the choices otherwise."""
    if fault is None:
        return None
    try:
        return parse_fault(fault)
    except ValueError as e:
        raise ToolError(str(e)) from None


def list_exchanges(
    queries: Queries, *, api: str | None = None, model: str | None = None,
    outcome: str | None = None, fault: str | None = None, host: str | None = None,
    since: str | None = None,
    text: str | None = None, order_by: str = NEWEST, limit: int = 20, cursor: str | None = None,
    max_bytes: int = PAGE_BYTES, **ranges_ms: float | None,
) -> dict[str, Any]:  # fmt: skip
    """``ranges_ms``: min_ttft_ms=2000 and the like (:data:`RANGE_ARGS`), in milliseconds."""
    filters = ExchangeFilter(api=api, model=model, outcome=outcome_of(outcome),
                             fault=fault_of(fault), host=host, since=since_of(since), text=text,
                             **_ranges(ranges_ms))  # fmt: skip
    n, budget = limit_of(limit), budget_of(max_bytes)
    try:
        sort = Sort.parse(order_by, option="order_by")
        rows = queries.exchanges(filters, limit=n, sort=sort, cursor=cursor or None)
    except ValueError as e:  # an unknown order, or a cursor of another
        raise ToolError(str(e)) from None
    counts = queries.finding_counts([x.id for x in rows])
    # A text search: where each exchange has the text, and the text around it.
    found = TextMatches(queries.store).around([x.id for x in rows], text) if text else {}
    page = Page.fill(rows, lambda x: {**clip(summary(x)), "findings": counts.get(x.id, 0),
                                      **TextMatch.doc_of(found, x.id, text)},
                     budget, "exchange")  # fmt: skip
    last = rows[page.rows - 1] if page.more(rows, n) else None
    return {"exchanges": page.docs, "next_cursor": sort.cursor(last) if last else None,
            **page.fields()}  # fmt: skip


# list_exchanges' range arguments (min_ttft_ms, ...) and the filter field each sets.
RANGE_ARGS = {f"{end}_{name}_ms": f"{end}_{name}" for name in RANGES for end in ("min", "max")}
# 31 years: no timing any exchange has (and no 64-bit microseconds past it).
MAX_RANGE_MS = 10**12


def _ranges(given: dict[str, float | None]) -> dict[str, Any]:
    """The filter's ranges, in microseconds, of the arguments given in milliseconds."""
    out: dict[str, Any] = {}
    for arg, ms in given.items():
        if arg not in RANGE_ARGS:
            raise TypeError(f"list_exchanges() got an unexpected keyword argument {arg!r}")
        if ms is None:
            continue
        if not (math.isfinite(ms) and 0 <= ms <= MAX_RANGE_MS):
            raise ToolError(f"{arg}: from 0 to {MAX_RANGE_MS:,} ms, not {ms}")
        out[RANGE_ARGS[arg]] = round(ms * 1000)
    return out


def event_doc(e: Event) -> dict[str, Any]:
    doc = {"seq": e.seq, "offset_ms": round(e.offset_us / 1000, 3), "event": clip(e.event),
           "data": texts.text(e.data, EVENT_TEXT)}  # fmt: skip
    if e.direction is not None:  # a WebSocket message: who sent it
        doc["direction"] = e.direction
    return doc


def _listed(
    name: str, items: list[Any], budget: int, how: str, total: int | None = None
) -> dict[str, Any]:
    """``items`` as the documents that fit ``budget`` (at least one), with how many there
    are (``total``, when there are more than ``items``) and, when not all are shown, a note
    saying how to see the rest."""
    page = Page.fill(items, clip, budget, name.rstrip("s").replace("_", " "))
    total = len(items) if total is None else total
    out: dict[str, Any] = {name: page.docs, f"{name}_total": total}
    if page.rows < total or page.note is not None:
        shown = f"{page.rows} of {total} shown, within max_bytes ({budget})"
        out[f"{name}_note"] = f"{shown}: {how}" + (f"; {page.note}" if page.note else "")
    return out


_MORE = f"a larger max_bytes (at most {MAX_PAGE_BYTES}) shows more"


def _knowledge(head: ExchangeHead, queries: Queries, budget: int) -> dict[str, Any]:
    x = head.exchange
    doc = knowledge(x, queries.findings(x.id), full=True, text=False)
    doc["output_text"] = texts.head(head.output_text)
    for name in _LONG_TEXTS[1:]:
        doc[name] = texts.text(doc[name])
    calls, total = doc["tool_calls"], doc["tool_calls_total"]
    if calls is not None:
        kept = (f"{_MORE} of the first {len(calls)}, which the store keeps of {total} "
                "(every call is in the stream's events: events=true)")  # fmt: skip
        doc.update(_listed("tool_calls", calls, budget, kept, total))
    doc.update(_listed("findings", doc["findings"], budget, _MORE))
    return {k: v if k in _LONG_TEXTS else clip(v) for k, v in doc.items()}


def _session(x: Exchange, queries: Queries, budget: int) -> dict[str, Any]:
    """A WebSocket session's frames per lane and its first turns, as many as fit ``budget``
    (each with its TTFT, duration, longest gap, usage and outcome)."""
    s = SessionTurns.read(TurnReads(queries.store), x, keep=TURNS_SHOWN)
    how = (f"the first {TURNS_SHOWN} are read; each turn's frames are in the events "
           "(events=true, after_seq=its asked_seq - 1)")  # fmt: skip
    return {
        "frames": {"client": s.client.doc(), "server": s.server.doc()},
        "audio_deltas": s.audio_deltas,
        **_listed("turns", [t.doc() for t in s.turns], budget, how, s.total),
    }


def _read(queries: Queries, id_or_uid: str | int) -> ExchangeHead:
    """The exchange an agent names (as :func:`lookup` takes it), its bodies and output text
    read cut to what is shown."""
    key = id_or_uid.strip() if isinstance(id_or_uid, str) else id_or_uid
    found = ExchangeHeads(queries.store).exchange(key, texts.TEXT) if key != "" else None
    if found is None:
        raise ToolError(f"no exchange {str(id_or_uid)[:40]!r} in this store")
    return found


def get_exchange(
    queries: Queries, id: str | int, *, events: bool = False, after_seq: int = -1,
    limit: int = 50, max_bytes: int = PAGE_BYTES,
) -> dict[str, Any]:  # fmt: skip
    """One exchange; each list in it (headers, tool calls, findings, events) holds what fits
    ``max_bytes``, with its total."""
    budget = budget_of(max_bytes)
    head = _read(queries, id)
    x = head.exchange
    doc: dict[str, Any] = {
        "exchange": clip(summary(x)),
        "request": {
            **_listed("headers", x.request_headers or [], budget, _MORE),
            "body": texts.head(head.request_body),
        },
        "response": {
            "status": x.status,
            "reason": clip(x.reason),
            **_listed("headers", x.response_headers or [], budget, _MORE),
            # A stream's body is its events.
            "body": texts.head(head.response_body),
        },
        "analysis": _knowledge(head, queries, budget),
    }
    if is_session(x):
        doc.update(_session(x, queries, budget))
    if events:
        n = limit_of(limit, EVENTS_MAX)
        rows = queries.events_page(x.id, after_seq=after_seq, limit=n)
        page = Page.fill(rows, event_doc, budget, "event")
        doc["events"] = page.docs
        doc["events_next_after_seq"] = rows[page.rows - 1].seq if page.more(rows, n) else None
        doc["events_page_bytes"] = page.bytes
        if page.note is not None:
            doc["events_note"] = page.note
    return doc
