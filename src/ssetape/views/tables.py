"""How exchanges look to a user: JSON objects for scripts, rich renderables for people."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ssetape.storage.models import Event, Exchange, Finding

if TYPE_CHECKING:
    from ssetape.views.timeline import Timeline

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
    """What the stream told (see ssetape.analysis.analyzer); null where not analysed or not reported."""
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


_MODEL_WIDTH = 16  # long gateway model names ("openai/gpt-4o-2024-08-06") end in "…"
_LIST_COLUMNS = ("id", "started", "status", "model", "outcome", "events", "tokens", "ttft ms")


def list_table(rows: list[Exchange], width: int = 80) -> Table:
    hosts = {(x.scheme, x.host, x.port) for x in rows}
    one_host = len(hosts) == 1
    title = None
    if one_host:  # the common case: the request column then needs only the path
        title = f"{len(rows)} exchange(s) with {origin_of(rows[0])}"
    # Without the date when all rows are from one day: ten columns must fit in 80.
    when = "%H:%M:%S" if len({x.started_at.date() for x in rows}) <= 1 else "%m-%d %H:%M"
    cells: list[list[str]] = []
    for x in rows:
        query = f"?{x.query}" if x.query else ""
        cells.append(
            [
                str(x.id),
                x.started_at.strftime(when),
                "" if x.status is None else str(x.status),
                x.model or "",
                x.outcome or x.state,
                str(x.event_count) if x.is_stream else "",
                _tokens(x),
                _ms_cell(x.ttft_us),
                f"{x.method} {x.path}{query}" if one_host else f"{x.method} {url_of(x)}",
            ]
        )
    fixed = [max([len(h), *(len(c[i]) for c in cells)]) for i, h in enumerate(_LIST_COLUMNS)]
    fixed[3] = min(fixed[3], _MODEL_WIDTH)
    # The request column takes what is left (one space between columns), at least 12.
    request_width = max(12, width - sum(fixed) - len(fixed))
    t = Table(
        box=None,
        header_style="bold",
        title=title,
        title_justify="left",
        collapse_padding=True,
        pad_edge=False,
    )
    for col in _LIST_COLUMNS:
        t.add_column(
            col,
            justify="left" if col in ("started", "model", "outcome") else "right",
            no_wrap=True,
            overflow="ellipsis",
            max_width=_MODEL_WIDTH if col == "model" else None,
        )
    t.add_column("request", no_wrap=True, overflow="ellipsis", max_width=request_width)
    for c in cells:
        t.add_row(*c[:4], Text(c[4], style=_OUTCOME_STYLE.get(c[4], "yellow")), *c[5:])
    return t


_OUTCOME_STYLE = {"completed": "green", "error": "red", "http_error": "red", "cut": "red"}


def _ms_cell(us: int | None) -> str:
    return "" if us is None else f"{us / 1000:.1f}"


def _tokens(x: Exchange) -> str:
    if x.input_tokens is None and x.output_tokens is None:
        return ""
    return f"{x.input_tokens if x.input_tokens is not None else '-'}/" + (
        f"{x.output_tokens if x.output_tokens is not None else '-'}"
    )


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


def show_view(x: Exchange, events: list[Event], findings: list[Finding]) -> RenderableType:
    s = summary(x)
    head = Text.assemble(
        (f"#{x.id} ", "bold"),
        f"{x.method} {s['url']}  ",
        (f"{x.status or '-'} ", "bold"),
        (x.state, "green" if x.state == "completed" else "yellow"),
        f"  ttfb {s['ttfb_ms']} ms  ttft {s['ttft_ms']} ms  duration {s['duration_ms']} ms",
    )
    parts: list[RenderableType] = [head]
    if x.error:
        parts.append(Text(f"error: {x.error}", style="red"))
    if x.analysis_version is not None:
        parts.append(_knowledge_line(x))
        parts += _said(x)
    for f in findings:
        where = "" if f.event_seq is None else f" (event #{f.event_seq})"
        parts.append(Text(f"finding {f.code}{where}: {f.detail}", style="magenta"))
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


def _knowledge_line(x: Exchange) -> Text:
    reason = f" ({x.outcome_reason})" if x.outcome_reason else ""
    gaps = (
        f"  gaps median/p95/max {_ms_cell(x.gap_median_us)}/{_ms_cell(x.gap_p95_us)}/"
        f"{_ms_cell(x.gap_max_us)} ms"
        if x.gap_max_us is not None
        else ""
    )
    tps = f"  {x.tokens_per_s:.1f} tok/s" if x.tokens_per_s is not None else ""
    return Text.assemble(
        f"{x.api} {x.model or '-'}  ",
        (f"{x.outcome}{reason}", _OUTCOME_STYLE.get(x.outcome or "", "yellow")),
        f"  tokens in/out {_tokens(x) or '-'}{tps}{gaps}",
    )


def timeline_of(x: Exchange, events: list[Event]) -> Timeline:
    """The picture of when each event came, for `ssetape show --timeline/--svg`."""
    from ssetape.views.timeline import Mark, Timeline

    marks = [
        Mark(e.seq, e.offset_us, Timeline.classify(e.event, e.data, x.api), e.event or _label(e))
        for e in events
    ]
    title = f"#{x.id} {x.method} {url_of(x)} {x.model or ''} {x.outcome or x.state}"
    return Timeline(
        marks, ttfb_us=x.ttfb_us, ttft_us=x.ttft_us, duration_us=x.duration_us, title=title
    )


def _label(e: Event) -> str:
    return ":" if e.data is None else "message"


_SAID_MAX = 2000  # characters of each text shown; `show --json` has all of it


def _said(x: Exchange) -> list[Text]:
    """What the model answered, as the user would have read it."""
    details = x.details or {}
    out: list[Text] = []
    for label, text in (
        ("reasoning", details.get("reasoning_text")),
        ("output", x.output_text),
        ("refusal", details.get("refusal_text")),
    ):
        if text:
            more = f" … ({len(text) - _SAID_MAX} more characters)" if len(text) > _SAID_MAX else ""
            out.append(Text.assemble((f"{label}: ", "bold"), text[:_SAID_MAX] + more))
    for call in details.get("tool_calls") or []:
        out.append(
            Text.assemble(
                ("tool call: ", "bold"),
                f"{call.get('name')}({call.get('arguments', '')[:_SAID_MAX]})",
            )
        )
    return out
