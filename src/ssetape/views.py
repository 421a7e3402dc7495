"""How exchanges look to a user: JSON objects for scripts, rich renderables for people."""

from __future__ import annotations

from typing import Any

import orjson
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ssetape.storage.models import Event, Exchange

DEFAULT_PORTS = {"http": 80, "https": 443}


def url_of(x: Exchange) -> str:
    port = "" if DEFAULT_PORTS.get(x.scheme) == x.port else f":{x.port}"
    query = f"?{x.query}" if x.query else ""
    return f"{x.scheme}://{x.host}{port}{x.path}{query}"


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
    }


def detail(x: Exchange, events: list[Event]) -> dict[str, Any]:
    body = x.response_body
    if body is None and x.is_stream and not _encoded(x):
        body = b"".join(e.raw for e in events)
    return {
        **summary(x),
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


def list_table(rows: list[Exchange]) -> Table:
    t = Table(box=None, header_style="bold")
    for col, just in [
        ("id", "right"),
        ("started", "left"),
        ("method", "left"),
        ("url", "left"),
        ("status", "right"),
        ("state", "left"),
        ("events", "right"),
        ("ttfb ms", "right"),
    ]:
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    for x in rows:
        ttfb = "" if x.ttfb_us is None else f"{x.ttfb_us / 1000:.1f}"
        state = Text(x.state, style="green" if x.state == "completed" else "yellow")
        t.add_row(
            str(x.id),
            x.started_at.strftime("%Y-%m-%d %H:%M:%S"),
            x.method,
            url_of(x),
            "" if x.status is None else str(x.status),
            state,
            str(x.event_count) if x.is_stream else "",
            ttfb,
        )
    return t


def _headers_table(title: str, headers: list[list[str]] | None) -> Table:
    t = Table(title=title, title_justify="left", box=None, show_header=False)
    t.add_column(style="cyan")
    t.add_column()
    for name, value in headers or []:
        t.add_row(name, value)
    return t


def _pretty(body: bytes | None) -> str:
    if not body:
        return ""
    try:
        return orjson.dumps(orjson.loads(body), option=orjson.OPT_INDENT_2).decode()
    except orjson.JSONDecodeError:
        return body.decode("utf-8", "replace")


def show_view(x: Exchange, events: list[Event]) -> RenderableType:
    s = summary(x)
    head = Text.assemble(
        (f"#{x.id} ", "bold"),
        f"{x.method} {s['url']}  ",
        (f"{x.status or '-'} ", "bold"),
        (x.state, "green" if x.state == "completed" else "yellow"),
        f"  ttfb {s['ttfb_ms']} ms  duration {s['duration_ms']} ms",
    )
    parts: list[RenderableType] = [head]
    if x.error:
        parts.append(Text(f"error: {x.error}", style="red"))
    parts += [
        _headers_table("request headers", x.request_headers),
        Text(_pretty(x.request_body)),
        _headers_table("response headers", x.response_headers),
    ]
    if x.is_stream:
        t = Table(title=f"{len(events)} events", title_justify="left", box=None)
        t.add_column("seq", justify="right")
        t.add_column("offset ms", justify="right")
        t.add_column("event")
        t.add_column("data", overflow="fold")
        for e in events:
            label = e.event or ("comment" if e.raw.lstrip().startswith(b":") else "-")
            data = e.data if e.data is not None else e.raw.decode("utf-8", "replace").strip()
            t.add_row(str(e.seq), f"{e.offset_us / 1000:.1f}", label, data)
        parts.append(t)
    else:
        parts.append(Text(_pretty(x.response_body)))
    return Group(*parts)
