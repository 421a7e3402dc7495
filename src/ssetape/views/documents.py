"""How exchanges look to scripts: the JSON documents of `list --json` and `show --json`."""

from __future__ import annotations

import base64
import codecs
import re
import secrets
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, BinaryIO

import orjson

from ssetape.analysis.session_rules import shown_error
from ssetape.cost.price import usd
from ssetape.framing.framings import Framing, framing_of_headers
from ssetape.http_fields import origin
from ssetape.vocabulary import Transport

# Types only: `ssetape show --help` reads EVENTS_SHOWN without importing the store.
if TYPE_CHECKING:
    from ssetape.storage.models import Event, Exchange, Finding
    from ssetape.storage.queries import Queries

__all__ = [
    "EVENTS_SHOWN", "TOOL_CALLS_SHOWN", "TURNS_SHOWN", "cost_of", "knowledge", "origin_of",
    "summary", "url_of", "write_detail",
]  # fmt: skip


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
        "error": shown_error(x.error),  # a server's normal close is no error
        "api": x.api,
        "model": x.model,
        "outcome": x.outcome,
        "reason": x.outcome_reason,
        # Who made it fail (vocabulary.Fault): null when it did not.
        "fault": x.fault,
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
        "events_pruned_at": None if x.events_pruned_at is None else x.events_pruned_at.isoformat(),
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


def knowledge(
    x: Exchange, findings: list[Finding], *, full: bool = False, text: bool = True
) -> dict[str, Any]:
    """What the stream told (see ssetape.analysis.analyzer); null where not analysed or not
    reported. The tool calls stored (the first 1,000: ssetape.analysis.tool_calls) are cut to
    the first :data:`TOOL_CALLS_SHOWN` unless ``full``; ``tool_calls_total`` counts every
    call the stream opened. ``text``: read ``x.output_text`` (else null: read apart, cut)."""
    details = x.details or {}
    return {
        "gap_ms": {
            "median": _ms(x.gap_median_us),
            "p95": _ms(x.gap_p95_us),
            "max": _ms(x.gap_max_us),
        },
        "tokens_per_s": x.tokens_per_s,
        "output_text": x.output_text if text else None,
        "refusal_text": details.get("refusal_text"),
        "reasoning_text": details.get("reasoning_text"),
        **_tool_calls(details.get("tool_calls"), details.get("tool_calls_total"), full),
        "findings": [
            {"code": f.code, "event_seq": f.event_seq, "detail": f.detail} for f in findings
        ],
        "analyzed": x.analysis_version is not None,
    }


# Tool calls `show --json` holds unless --full: the first ones, with JSON_MAX characters of
# arguments among them (one cut to fit says its size, as an event does).
TOOL_CALLS_SHOWN = 100


def _tool_calls(calls: Any, total: Any, full: bool) -> dict[str, Any]:
    if not isinstance(calls, list):
        return {"tool_calls": None, "tool_calls_total": None}
    # Stored before the bound (analysis version 4): every call is in the list.
    total = total if isinstance(total, int) else len(calls)
    if full:
        return {"tool_calls": calls, "tool_calls_total": total}
    shown: list[Any] = []
    room = JSON_MAX
    for call in calls[:TOOL_CALLS_SHOWN]:
        args = call.get("arguments") if isinstance(call, dict) else None
        if isinstance(args, str) and len(args) > room:
            shown.append({**call, "arguments": args[:room], "arguments_characters": len(args)})
            break
        shown.append(call)
        room -= len(args) if isinstance(args, str) else 0
    return {"tool_calls": shown, "tool_calls_total": total}


# What `show --json` holds of each event and body, unless --full.
JSON_MAX = 1024 * 1024


def _cut(data: bytes | None, full: bool) -> tuple[str | dict[str, str] | None, int | None]:
    """``data`` (cut to JSON_MAX unless ``full``) as text, or as ``{"b64": ...}`` when it is
    not UTF-8 (an AWS event-stream frame), as cassettes write bytes; and its size when cut."""
    if data is None:
        return None, None
    if full or len(data) <= JSON_MAX:
        return _text(data), None
    return _text(data[:JSON_MAX]), len(data)


def _not_stored(x: Exchange) -> dict[str, Any]:
    """For a body over ssetape_max_response_body when recorded: ``body`` is its first bytes,
    this says so, with its whole size and hash (the request's stand-in's words)."""
    if x.response_body_bytes is None:
        return {}
    size, sha = x.response_body_bytes, x.response_body_sha256
    return {"body_bytes": size, "body_not_stored": {"bytes": size, "sha256": sha}}


def _text(data: bytes) -> str | dict[str, str]:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.reason == "unexpected end of data" and e.end == len(data):
            return data[: e.start].decode("utf-8")  # a character the cut split
        return {"b64": base64.b64encode(data).decode("ascii")}


# What a terminal acts on and orjson leaves as it is (it escapes C0 only): DEL and C1.
_CONTROLS = re.compile(rb"\x7f|\xc2[\x80-\x9f]")


def _escaped(text: bytes) -> bytes:
    """JSON text with DEL and C1 characters written as \\u escapes (the same JSON)."""
    return _CONTROLS.sub(lambda m: b"\\u%04x" % ord(m.group().decode()), text)


def _event(e: Event, full: bool) -> dict[str, Any]:
    raw, size = _cut(e.raw, full)
    data = e.data
    if not full and data is not None and len(data) > JSON_MAX:
        data = data[:JSON_MAX]
    doc: dict[str, Any] = {"seq": e.seq, "offset_us": e.offset_us, "event": e.event, "data": data,
           "id": e.sse_id, "raw": raw}  # fmt: skip
    if e.direction is not None:  # a WebSocket message: who sent it, text or binary
        doc["direction"], doc["opcode"] = e.direction, e.opcode
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
    body: str | dict[str, str] | None
    body, body_size = _cut(x.response_body, full)
    # A WebSocket session's 101 has no body: its messages are its events, each side's.
    streamed = (
        x.response_body is None and x.is_stream and not _encoded(x)
        and x.transport != Transport.WEBSOCKET
    )  # fmt: skip
    if streamed and not full:  # the stream as sent, cut: read only as much as is shown
        body, body_size = _stream_head(x, queries)
    # A whole stream goes out piece by piece where this placeholder stands.
    hole = f"<{secrets.token_hex(16)}>"
    doc = {
        **summary(x),
        **knowledge(x, findings, full=full),
        "fingerprint": x.fingerprint,
        "request": {"headers": x.request_headers, "body": request_body,
                    **({"body_bytes": request_size} if request_size else {})},
        "response": {"reason": x.reason, "headers": x.response_headers,
                     "body": hole if streamed and full else body,
                     **({"body_bytes": body_size} if body_size else {}),
                     **_not_stored(x)},
        **_session(x, queries, full),
        "events_total": queries.event_span(x.id).count,
        "events": [],
    }  # fmt: skip
    text = orjson.dumps(doc, option=orjson.OPT_INDENT_2)
    # Written up to the events' empty list, which is filled here.
    head, _, _ = text.rpartition(b"[]")
    before, placeholder, after = head.partition(orjson.dumps(hole))

    def write(text: bytes) -> None:
        out.write(_escaped(text))

    write(before)
    if placeholder and framing_of_headers(x.response_headers) is Framing.EVENTSTREAM:
        _write_b64(write, (e.raw for e in queries.events(x.id)))
        write(after)
    elif placeholder:
        write(b'"')
        decode = codecs.getincrementaldecoder("utf-8")("replace")
        for e in queries.events(x.id):
            write(orjson.dumps(decode.decode(e.raw))[1:-1])
        write(orjson.dumps(decode.decode(b"", final=True))[1:-1] + b'"')
        write(after)
    sep = b"[\n"
    for e in queries.events(x.id, start=start, stop=stop):
        item = orjson.dumps(_event(e, full), option=orjson.OPT_INDENT_2)
        write(sep + b"    " + item.replace(b"\n", b"\n    "))
        sep = b",\n"
    out.write(b"[]\n}\n" if sep == b"[\n" else b"\n  ]\n}\n")


# Turns of a WebSocket session `show` prints and `show --json` holds unless --full.
TURNS_SHOWN = 100


def _session(x: Exchange, queries: Queries, full: bool) -> dict[str, Any]:
    """A WebSocket session's frames per lane, its first TURNS_SHOWN turns (every one with
    ``full``) and ``turns_total``; nothing for HTTP."""
    if x.transport != Transport.WEBSOCKET:
        return {}
    # Here: the store's reads, which `ssetape show --help` does without.
    from ssetape.analysis.turns import SessionTurns
    from ssetape.storage.turns import TurnReads

    shown = None if full else TURNS_SHOWN
    return SessionTurns.read(TurnReads(queries.store), x, keep=shown).doc(shown)


def _write_b64(write: Callable[[bytes], object], pieces: Iterable[bytes]) -> None:
    """A binary stream as ``{"b64": "..."}``, written a piece at a time."""
    write(b'{"b64": "')
    carry = b""
    for piece in pieces:
        whole = carry + piece
        cut = len(whole) - len(whole) % 3
        write(base64.b64encode(whole[:cut]))
        carry = whole[cut:]
    write(base64.b64encode(carry) + b'"}')


def _stream_head(x: Exchange, queries: Queries) -> tuple[str | dict[str, str], int | None]:
    """The first JSON_MAX bytes of a stream as sent, and its whole size if that is more."""
    got: list[bytes] = []
    size = 0
    for e in queries.events(x.id):
        got.append(e.raw)
        size += len(e.raw)
        if size > JSON_MAX:
            return _text(b"".join(got)[:JSON_MAX]), queries.event_bytes(x.id)
    return _text(b"".join(got)), None


def _encoded(x: Exchange) -> bool:
    return any(
        k.lower() == "content-encoding" and v.lower() not in ("", "identity")
        for k, v in (x.response_headers or [])
    )
