"""How exchanges look to people: rich tables and views for the terminal."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import orjson
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ssetape.analysis.session_rules import NORMAL, server_close, shown_error
from ssetape.cost.price import NO_PRICE, format_usd, price_line
from ssetape.storage.models import Event, Exchange, Finding
from ssetape.views.documents import origin_of, summary, url_of
from ssetape.views.escape import abbreviated, abbreviated_bytes, cell, visible
from ssetape.views.stat_table import stats_table
from ssetape.vocabulary import ExchangeState, Outcome, RunState

__all__ = [
    "BODY_MAX",
    "EVENT_MAX",
    "HEADERS_SHOWN",
    "SAID_MAX",
    "events_tables",
    "list_table",
    "runs_table",
    "show_parts",
    "show_view",
    "stats_table",
]

# What `ssetape show` prints of each, unless --full: a 50 MB event must not take minutes.
EVENT_MAX = 2000  # characters of an event's data
SAID_MAX = 2000  # characters of the model's output, reasoning, refusal, a tool call
BODY_MAX = 64 * 1024  # bytes of a request or response body
HEADERS_SHOWN = 100  # request or response headers

_MODEL_WIDTH = 16  # long gateway model names ("openai/gpt-4o-2024-08-06") end in "…"
_REQUEST_ROOM = 40  # characters of the request column a whole model name never takes
_LIST_COLUMNS = (
    "id", "started", "status", "model", "outcome", "events", "tokens", "cost", "ttft ms"
)  # fmt: skip


def list_table(rows: list[Exchange], width: int = 80) -> Table:
    hosts = {(x.scheme, x.host, x.port) for x in rows}
    one_host = len(hosts) == 1
    title = None
    if one_host:  # the common case: the request column then needs only the path
        # The host is recorded text (a cassette, a shared store): a str title would be markup.
        title = cell(f"{len(rows)} exchange(s) with {origin_of(rows[0])}")
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
                _cost_cell(x),
                _ms_cell(x.ttft_us),
                f"{x.method} {x.path}{query}" if one_host else f"{x.method} {url_of(x)}",
            ]
        )
    fixed = [max([len(h), *(len(c[i]) for c in cells)]) for i, h in enumerate(_LIST_COLUMNS)]
    # The model shows whole where the terminal has room for it beside a request of
    # _REQUEST_ROOM; narrower, it gives way first, to _MODEL_WIDTH, then down to 8, while the
    # request column keeps at least 12 (one space between columns).
    room = width - (sum(fixed) - fixed[3]) - len(fixed)
    fixed[3] = min(fixed[3], max(_MODEL_WIDTH, room - _REQUEST_ROOM))
    fixed[3] = max(8, min(fixed[3], room - 12))
    request_width = max(12, width - sum(fixed) - len(fixed))
    t = Table(
        box=None,
        header_style="bold",
        title=title,
        title_justify="left",
        collapse_padding=True,
        pad_edge=False,
    )
    for i, col in enumerate(_LIST_COLUMNS):
        t.add_column(
            col,
            justify="left" if col in ("started", "model", "outcome") else "right",
            no_wrap=True,
            overflow="ellipsis",
            # Only the model and the request give way when the terminal is narrow: a cut
            # time, count or price would read as another value.
            min_width=None if col == "model" else fixed[i],
            max_width=fixed[i] if col == "model" else None,
        )
    t.add_column("request", no_wrap=True, overflow="ellipsis", max_width=request_width)
    for c in cells:
        outcome = cell(c[4], _OUTCOME_STYLE.get(c[4], "yellow"))
        cost = cell(c[7], "dim" if c[7] == NO_PRICE else "")
        t.add_row(*map(cell, c[:4]), outcome, *map(cell, c[5:7]), cost, *map(cell, c[8:]))
    return t


_OUTCOME_STYLE: dict[str, str] = {
    Outcome.COMPLETED: "green",
    Outcome.ERROR: "red",
    Outcome.HTTP_ERROR: "red",
    Outcome.CUT: "red",
}


def _ms_cell(us: int | None) -> str:
    return "" if us is None else f"{us / 1000:.1f}"


def _cost_cell(x: Exchange) -> str:
    """Blank when never priced (`ssetape reindex` prices it); "no price" is not $0."""
    return "" if x.price_data is None else format_usd(x.cost_nusd)


def _tokens(x: Exchange) -> str:
    if x.input_tokens is None and x.output_tokens is None:
        return ""
    return f"{x.input_tokens if x.input_tokens is not None else '-'}/" + (
        f"{x.output_tokens if x.output_tokens is not None else '-'}"
    )


def _token_parts(x: Exchange) -> str:
    """The parts of the counts the provider reported apart, beside them."""
    parts = [
        f"{label} {n}"
        for label, n in (
            ("cache read", x.cache_read_tokens),
            ("cache write", x.cache_write_tokens),
            ("reasoning", x.reasoning_tokens),
        )
        if n
    ]
    return f" ({', '.join(parts)})" if parts else ""


def _headers(title: str, headers: list[list[str]] | None, full: bool) -> Iterator[Text]:
    """Header lines (name in color): the first HEADERS_SHOWN unless ``full``, in one pass."""
    headers = headers or []
    shown = headers if full else headers[:HEADERS_SHOWN]
    yield Text(title, style="italic")
    for name, value in shown:
        line = cell(name, "cyan")
        line.append(" ")
        line.append(cell(value))
        yield line
    if len(shown) < len(headers):
        more = len(headers) - len(shown)
        yield Text(f"… {more:,} more headers; show --full prints them", style="dim")


def _pretty(body: bytes | None, full: bool) -> Text:
    if not body:
        return Text("")
    if not full and len(body) > BODY_MAX:
        return cell(abbreviated_bytes(body, BODY_MAX))
    try:
        text = orjson.dumps(orjson.loads(body), option=orjson.OPT_INDENT_2).decode()
    except orjson.JSONDecodeError:
        text = body.decode("utf-8", "replace")
    return cell(text)


def show_view(
    x: Exchange, events: list[Event], findings: list[Finding], *, full: bool = False
) -> RenderableType:
    """One exchange for a person, its events given (see :func:`show_parts`)."""
    parts = show_parts(x, findings, full=full)
    if x.is_stream:
        parts.extend(events_tables(events, total=len(events), full=full))
    return Group(*parts)


def show_parts(x: Exchange, findings: list[Finding], *, full: bool = False) -> list[RenderableType]:
    """What `show` prints before the events (all of it for a response that is not a stream):
    bodies past a few kilobytes and headers past HEADERS_SHOWN are cut unless ``full``."""
    s = summary(x)
    head = Text.assemble(
        (f"#{x.id} ", "bold"),
        visible(f"{x.method} {s['url']}  "),
        (f"{x.status or '-'} ", "bold"),
        (visible(x.state), "green" if x.state == ExchangeState.COMPLETED else "yellow"),
    )
    # The figures on a line of their own, none that is unknown: a long URL wraps its own
    # line and never cuts a figure in two.
    shown = ((n, s[f"{n}_ms"]) for n in ("ttfb", "ttft", "duration"))
    figures = "  ".join(f"{name} {ms} ms" for name, ms in shown if ms is not None)
    parts: list[RenderableType] = [head]
    if figures:
        parts.append(Text(figures))
    if x.session is not None:
        parts.append(cell(f"session: {x.session}"))
    if error := shown_error(x.error):  # a server's normal close is no error: said below
        parts.append(cell(f"error: {error}", "red"))
    if (closed := server_close(x.error)) is not None and closed[0] in NORMAL:
        parts.append(cell(f"closed by the server: {closed[0]} {closed[1]}".rstrip()))
    if x.events_pruned_at is not None:
        when = f"{x.events_pruned_at:%Y-%m-%d %H:%M} UTC"
        parts.append(cell(f"events pruned {when}: the summary stays, replay skips it", "yellow"))
    if x.analysis_version is not None:
        parts.append(_knowledge_line(x))
        parts.append(_cost_line(x))
        parts += _said(x)
    for f in findings:
        where = "" if f.event_seq is None else f" (event #{f.event_seq})"
        parts.append(cell(f"finding {f.code}{where}: {f.detail}", "magenta"))
    parts += [
        *_headers("request headers", x.request_headers, full),
        _pretty(x.request_body, full),
        *_headers("response headers", x.response_headers, full),
    ]
    if not x.is_stream:
        if x.response_body_bytes is not None:  # over ssetape_max_response_body when recorded
            parts.append(cell(_not_stored(x), "yellow"))
        parts.append(_pretty(x.response_body, full))
    return parts


def _not_stored(x: Exchange) -> str:
    shown = len(x.response_body or b"")
    return (
        f"response body not stored whole: {x.response_body_bytes} bytes, sha256 "
        f"{x.response_body_sha256}; its first {shown} bytes follow (replay refuses it)"
    )


def events_tables(
    events: Iterable[Event],
    *,
    total: int,
    last_us: int = 0,
    full: bool = False,
    page: int = 1000,
) -> Iterator[Table]:
    """The events as tables of ``page`` rows, made as they are read, so the first rows print
    while the rest are still in the store; their columns keep one width throughout (set by
    ``total`` events and the ``last_us`` offset)."""
    widths: tuple[int, int, int] | None = None
    rows: list[Event] = []
    for e in events:
        rows.append(e)
        if len(rows) == page:
            title = None if widths else total  # the first table says how many there are
            widths = widths or _widths(rows, total, last_us)
            yield _events_table(rows, widths, full, title)
            rows = []
    if rows or widths is None:
        yield _events_table(
            rows, widths or _widths(rows, total, last_us), full, None if widths else total
        )


def _widths(rows: list[Event], total: int, last_us: int) -> tuple[int, int, int]:
    seq = max([3, len(str(total)), *(len(str(e.seq)) for e in rows)])
    offset = max([9, *(len(f"{us / 1000:.1f}") for us in (last_us, *(e.offset_us for e in rows)))])
    return seq, offset, min(max([5, *(len(_label(e)) for e in rows)]), 32)


def _label(e: Event) -> str:
    return e.event or ("comment" if e.raw.lstrip().startswith(b":") else "-")


def _events_table(
    rows: list[Event], widths: tuple[int, int, int], full: bool, title: int | None
) -> Table:
    t = Table(
        title=None if title is None else f"{title:,} events",
        title_justify="left",
        box=None,
        show_header=title is not None,
    )
    t.add_column("seq", justify="right", width=widths[0])
    t.add_column("offset ms", justify="right", width=widths[1])
    session = any(e.direction is not None for e in rows)  # WebSocket messages: who sent each
    if session:
        t.add_column("from", width=6)
    t.add_column("event", width=widths[2], no_wrap=True, overflow="ellipsis")
    t.add_column("data", overflow="fold")
    for e in rows:
        if e.data is not None:
            data = e.data if full else abbreviated(e.data, EVENT_MAX)
        elif full:
            data = e.raw.decode("utf-8", "replace").strip()
        else:
            data = abbreviated_bytes(e.raw, EVENT_MAX).strip()
        sender = (cell(e.direction),) if session else ()
        t.add_row(str(e.seq), f"{e.offset_us / 1000:.1f}", *sender, cell(_label(e)), cell(data))
    return t


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
        visible(f"{x.api} {x.model or '-'}  "),
        (visible(f"{x.outcome}{reason}"), _OUTCOME_STYLE.get(x.outcome or "", "yellow")),
        visible(f"  fault {x.fault}") if x.fault else "",
        f"  tokens in/out {_tokens(x) or '-'}{_token_parts(x)}{tps}{gaps}",
        visible(f"  profile {x.profile}") if x.profile else "",
    )


def _cost_line(x: Exchange) -> Text:
    line = price_line(
        x.cost_nusd,
        provider=x.price_provider,
        model=x.price_model,
        note=x.price_note,
        data=x.price_data,
    )
    return cell(f"cost {line}", "dim" if x.cost_nusd is None else "")


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
            out.append(Text.assemble((f"{label}: ", "bold"), visible(abbreviated(text, SAID_MAX))))
    for call in details.get("tool_calls") or []:
        shown = abbreviated(f"{call.get('name')}({call.get('arguments', '')})", SAID_MAX)
        out.append(Text.assemble(("tool call: ", "bold"), visible(shown)))
    return out


def runs_table(runs: list[dict[str, Any]]) -> Table:
    """`ssetape stats --runs`: one row per recorder run (see Runs.totals)."""
    t = Table(box=None, header_style="bold", collapse_padding=True, pad_edge=False)
    t.add_column("recorder", no_wrap=True, overflow="ellipsis", max_width=32)
    t.add_column("name", no_wrap=True, overflow="ellipsis", max_width=32)  # its instance's
    t.add_column("status")
    for col in ("exchanges", "events", "events lost", "exchanges lost", "store errors"):
        t.add_column(col, justify="right")
    for r in runs:
        lost = r["events_lost"] or r["exchanges_lost"] or r["store_errors"]
        t.add_row(
            cell(r["recorder"]),
            cell(r.get("name")),
            Text(r["status"], style="red" if r["status"] == RunState.STALLED else ""),
            f"{r['exchanges_recorded']:,}",
            f"{r['events_recorded']:,}",
            Text(f"{r['events_lost']:,}", style="red" if lost else ""),
            f"{r['exchanges_lost']:,}",
            f"{r['store_errors']:,}",
        )
    return t
