"""How exchanges look to scripts: the JSON documents of `list --json` and `show --json`."""

from __future__ import annotations

from typing import Any

from ssetape.storage.models import Event, Exchange, Finding

__all__ = ["detail", "knowledge", "origin_of", "summary", "url_of"]

DEFAULT_PORTS = {"http": 80, "https": 443}


def origin_of(x: Exchange) -> str:
    port = "" if DEFAULT_PORTS.get(x.scheme) == x.port else f":{x.port}"
    return f"{x.scheme}://{x.host}{port}"


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


def detail(
    x: Exchange, events: list[Event], findings: list[Finding], *, full: bool = False
) -> dict[str, Any]:
    """The whole exchange for scripts; events and bodies over JSON_MAX are cut (saying so,
    with their size) unless ``full``."""
    body = x.response_body
    if body is None and x.is_stream and not _encoded(x):
        body = b"".join(e.raw for e in events)
    request_body, request_size = _cut(x.request_body, full)
    response_body, response_size = _cut(body, full)
    return {
        **summary(x),
        **knowledge(x, findings),
        "fingerprint": x.fingerprint,
        "request": {"headers": x.request_headers, "body": request_body,
                    **({"body_bytes": request_size} if request_size else {})},
        "response": {"reason": x.reason, "headers": x.response_headers, "body": response_body,
                     **({"body_bytes": response_size} if response_size else {})},
        "events": [_event(e, full) for e in events],
    }  # fmt: skip


def _encoded(x: Exchange) -> bool:
    return any(
        k.lower() == "content-encoding" and v.lower() not in ("", "identity")
        for k, v in (x.response_headers or [])
    )
