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


def _text(body: bytes | None) -> str | None:
    return None if body is None else body.decode("utf-8", "replace")


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
        },
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


def detail(x: Exchange, events: list[Event], findings: list[Finding]) -> dict[str, Any]:
    body = x.response_body
    if body is None and x.is_stream and not _encoded(x):
        body = b"".join(e.raw for e in events)
    return {
        **summary(x),
        **knowledge(x, findings),
        "fingerprint": x.fingerprint,
        "request": {"headers": x.request_headers, "body": _text(x.request_body)},
        "response": {
            "reason": x.reason,
            "headers": x.response_headers,
            "body": _text(body),
        },
        "events": [
            {
                "seq": e.seq,
                "offset_us": e.offset_us,
                "event": e.event,
                "data": e.data,
                "id": e.sse_id,
                "raw": e.raw.decode("utf-8", "replace"),
            }
            for e in events
        ],
    }


def _encoded(x: Exchange) -> bool:
    return any(
        k.lower() == "content-encoding" and v.lower() not in ("", "identity")
        for k, v in (x.response_headers or [])
    )
