"""How exchanges look to scripts: the JSON documents of `list --json` and `show --json`."""

from __future__ import annotations

import codecs
import secrets
from typing import Any, BinaryIO

import orjson

from ssetape.cost.price import usd
from ssetape.http_fields import origin
from ssetape.storage.models import Event, Exchange, Finding
from ssetape.storage.queries import Queries

__all__ = ["EVENTS_SHOWN", "cost_of", "knowledge", "origin_of", "summary", "url_of", "write_detail"]


def origin_of(x: Exchange) -> str:
    return origin(x.scheme, x.host, x.port)


def url_of(x: Exchange) -> str:
    query = f"?{x.query}" if x.query else ""
    return f"{origin_of(x)}{x.path}{query}"


def _ms(us: int | None) -> float | None:
    return None if us is None else round(us / 1000, 3)


def summary(x: Exchange) -> dict[str, Any]:
    return {
        "id": x.id,
        "uid": x.uid,
        "started_at": x.started_at.isoformat(),
        "method": x.method,
        "url": url_of(x),
        "status": x.status,
        "is_stream": x.is_stream,
        "event_count": x.event_count,
        "state": x.state,
        "ttfb_ms": _ms(x.ttfb_us),
        "duration_ms": _ms(x.duration_us),
        "error": x.error,
        "api": x.api,
        "model": x.model,
        "outcome": x.outcome,
        "reason": x.outcome_reason,
        "usage": {
            "input_tokens": x.input_tokens,
            "output_tokens": x.output_tokens,
            "total_tokens": x.total_tokens,
            "cache_read_tokens": x.cache_read_tokens,
            "cache_write_tokens": x.cache_write_tokens,
            "reasoning_tokens": x.reasoning_tokens,
        },
        "profile": x.profile,
        "ttft_ms": _ms(x.ttft_us),
        "session": x.session,
        "cost": cost_of(x),
    }


def cost_of(x: Exchange) -> dict[str, Any] | None:
    """The exchange's price (``usd`` None: no price, ``note`` says why); None when it was
    never priced (a store older than pricing, until `ssetape reindex`)."""
    if x.price_data is None:
        return None
    return {
        "usd": usd(x.cost_nusd),
        "nusd": x.cost_nusd,
        "provider": x.price_provider,
        "model": x.price_model,
        "note": x.price_note,
        "price_data": x.price_data,
    }


def knowledge(x: Exchange, findings: list[Finding]) -> dict[str, Any]:
    """What the stream told (see ssetape.analysis.analyzer); null where not analysed or not
    reported."""
    details = x.details or {}
    return {
        "gap_ms": {
            "median": _ms(x.gap_median_us),
            "p95": _ms(x.gap_p95_us),
            "max": _ms(x.gap_max_us),
        },
        "tokens_per_s": x.tokens_per_s,
        "output_text": x.output_text,
        "refusal_text": details.get("refusal_text"),
        "reasoning_text": details.get("reasoning_text"),
        "tool_calls": details.get("tool_calls"),
        "findings": [
            {"code": f.code, "event_seq": f.event_seq, "detail": f.detail} for f in findings
        ],
        "analyzed": x.analysis_version is not None,
    }


# What `show --json` holds of each event and body, unless --full.
JSON_MAX = 1024 * 1024


def _cut(data: bytes | None, full: bool) -> tuple[str | None, int | None]:
    """Text of ``data`` (cut to JSON_MAX unless ``full``), and its size when it was cut."""
    if data is None:
        return None, None
    if full or len(data) <= JSON_MAX:
        return data.decode("utf-8", "replace"), None
    return data[:JSON_MAX].decode("utf-8", "replace"), len(data)


def _event(e: Event, full: bool) -> dict[str, Any]:
    raw, size = _cut(e.raw, full)
    data = e.data
    if not full and data is not None and len(data) > JSON_MAX:
        data = data[:JSON_MAX]
    doc: dict[str, Any] = {"seq": e.seq, "offset_us": e.offset_us, "event": e.event, "data": data,
           "id": e.sse_id, "raw": raw}  # fmt: skip
    if size is not None or data is not e.data:
        doc["truncated"] = {"raw_bytes": len(e.raw), "data_characters": len(e.data or "")}
    return doc


# Events `show` prints or writes unless asked for a range or --full: the first screen of a
# stream of millions comes at once, in bounded memory.
EVENTS_SHOWN = 1000


def write_detail(
    out: BinaryIO,
    x: Exchange,
    queries: Queries,
    findings: list[Finding],
    *,
    full: bool = False,
    start: int = 0,
    stop: int | None = None,
) -> None:
    """The exchange for scripts, written as it is read: the events with ``start <= seq <
    stop``, one page at a time (never the whole stream in memory, even with ``full``); events
    and bodies over JSON_MAX are cut (saying so, with their size) unless ``full``.
    ``events_total`` is how many events the store holds for it."""
    request_body, request_size = _cut(x.request_body, full)
    body: str | None
    body, body_size = _cut(x.response_body, full)
    streamed = x.response_body is None and x.is_stream and not _encoded(x)
    if streamed and not full:  # the stream as sent, cut: read only as much as is shown
        body, body_size = _stream_head(x, queries)
    # A whole stream goes out piece by piece where this placeholder stands.
    hole = f"<{secrets.token_hex(16)}>"
    doc = {
        **summary(x),
        **knowledge(x, findings),
        "fingerprint": x.fingerprint,
        "request": {"headers": x.request_headers, "body": request_body,
                    **({"body_bytes": request_size} if request_size else {})},
        "response": {"reason": x.reason, "headers": x.response_headers,
                     "body": hole if streamed and full else body,
                     **({"body_bytes": body_size} if body_size else {})},
        "events_total": queries.event_span(x.id).count,
        "events": [],
    }  # fmt: skip
    text = orjson.dumps(doc, option=orjson.OPT_INDENT_2)
    # Written up to the events' empty list, which is filled here.
    head, _, _ = text.rpartition(b"[]")
    before, placeholder, after = head.partition(orjson.dumps(hole))
    out.write(before)
    if placeholder:
        out.write(b'"')
        decode = codecs.getincrementaldecoder("utf-8")("replace")
        for e in queries.events(x.id):
            out.write(orjson.dumps(decode.decode(e.raw))[1:-1])
        out.write(orjson.dumps(decode.decode(b"", final=True))[1:-1] + b'"')
        out.write(after)
    sep = b"[\n"
    for e in queries.events(x.id, start=start, stop=stop):
        item = orjson.dumps(_event(e, full), option=orjson.OPT_INDENT_2)
        out.write(sep + b"    " + item.replace(b"\n", b"\n    "))
        sep = b",\n"
    out.write(b"[]\n}\n" if sep == b"[\n" else b"\n  ]\n}\n")


def _stream_head(x: Exchange, queries: Queries) -> tuple[str, int | None]:
    """The first JSON_MAX bytes of a stream as sent, and its whole size if that is more."""
    got: list[bytes] = []
    size = 0
    for e in queries.events(x.id):
        got.append(e.raw)
        size += len(e.raw)
        if size > JSON_MAX:
            return b"".join(got)[:JSON_MAX].decode("utf-8", "replace"), queries.event_bytes(x.id)
    return b"".join(got).decode("utf-8", "replace"), None


def _encoded(x: Exchange) -> bool:
    return any(
        k.lower() == "content-encoding" and v.lower() not in ("", "identity")
        for k, v in (x.response_headers or [])
    )
