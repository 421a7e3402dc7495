"""`/exchanges/ID`: one exchange: request, response, what the stream said, its timeline, its
events a page at a time (``?after=SEQ``), and the play button's text.

Bounded: a page holds :data:`EVENTS_PER_PAGE` events, each event's data cut at
:data:`DATA_SHOWN` characters with a link to the whole (``/exchanges/ID/events/SEQ``), bodies
cut at :data:`BODY_SHOWN` bytes (read cut, with their sizes: a body of any size costs the page
no more than the cut) and headers at :data:`HEADERS_SHOWN` pairs. The exchange it is given
holds no bodies (:meth:`ssetape.storage.page_reads.PageReads.exchange`).
"""

from __future__ import annotations

import contextlib
from typing import Any

import orjson

from ssetape.analysis.session_rules import shown_error
from ssetape.cost.price import price_line
from ssetape.storage.models import Event, Exchange, Finding
from ssetape.storage.page_reads import BodyHead, PageReads
from ssetape.storage.queries import Queries
from ssetape.views.documents import url_of
from ssetape.views.ws_timeline import TURNS_SHOWN, SessionTimeline, is_session
from ssetape.vocabulary import ExchangeState
from ssetape.web.html import Markup, cut, el, join, link, ms, page
from ssetape.web.ws_timeline import SVG_WIDTH, session_section, svg_cells

__all__ = [
    "BODY_SHOWN", "DATA_SHOWN", "EVENTS_PER_PAGE", "HEADERS_SHOWN", "ZOOMS", "ExchangePage",
    "event_rows",
]  # fmt: skip

EVENTS_PER_PAGE = 500
DATA_SHOWN = 2000
BODY_SHOWN = 1024 * 1024
HEADERS_SHOWN = 200
# The timeline's zoom levels: it is drawn this many times wider and scrolls sideways.
ZOOMS = (1, 4, 16)


class ExchangePage:
    """The page of one exchange, from the events after seq ``after`` on."""

    def __init__(self, x: Exchange, queries: Queries, *, after: int = -1) -> None:
        self.x, self.queries, self.after = x, queries, after
        self._bodies: tuple[BodyHead, BodyHead] | None = None

    def bodies(self) -> tuple[BodyHead, BodyHead]:
        """The request and response bodies, cut at BODY_SHOWN bytes (read once)."""
        if self._bodies is None:
            read = PageReads(self.queries.store).bodies(self.x.id, BODY_SHOWN)
            self._bodies = read or (BodyHead(b"", 0), BodyHead(b"", 0))
        return self._bodies

    def render(self) -> str:
        x, q = self.x, self.queries
        findings = q.findings(x.id)
        events = q.events_page(x.id, after_seq=self.after, limit=EVENTS_PER_PAGE)
        shown = {e.seq for e in events}
        title = f"#{x.id} {x.method} {url_of(x)}"
        # What the stream did first (figures, text, timeline), then the request and the response
        # side by side, then the events: the first screen shows the stream, not its headers.
        body = [
            el("h1", title, class_="title"),
            el(
                "div",
                el(
                    "p",
                    "download: ",
                    *(
                        link(f"/exchanges/{x.id}/download/{kind}", label, class_="download") + " "
                        for kind, label in _DOWNLOAD_LINKS
                    ),
                    class_="downloads",
                ),
                self._compare_form(),
                class_="toolbar",
            ),
            self.facts(),
            self._said(),
            self._timeline() if x.is_stream and not is_session(x) else "",
            self._session() if is_session(x) else "",
            self.findings(findings, shown),
            el("div", self._request(), self.response(), class_="pair"),
            self._events(events) if x.is_stream else "",
        ]
        return page(f"ssetape: #{x.id}", *body)

    # -- parts -----------------------------------------------------------------------------

    def _compare_form(self) -> Markup:
        return el(
            "form",
            el("input", type="hidden", name="a", value=self.x.id),
            el("label", "compare with exchange ", el("input", name="b", size="8", required=True)),
            el("button", "compare", type="submit"),
            method="get",
            action="/compare",
            class_="compare-with",
            id="compare-with",
        )

    def facts(self) -> Markup:
        """The figures (also what a live page is sent as they change)."""
        x = self.x
        facts: list[tuple[str, object]] = [
            ("started (UTC)", x.started_at.isoformat(sep=" ", timespec="milliseconds")),
            ("state", x.state),
            ("outcome", x.outcome),
            ("fault", x.fault),  # whose: provider, client, network or ssetape
            ("reason", x.outcome_reason),
            ("error", shown_error(x.error)),  # a server's normal close is no error
            ("api", x.api),
            ("model", x.model),
            ("profile", x.profile),
            ("TTFB", ms(x.ttfb_us)),
            ("TTFT", ms(x.ttft_us)),
            ("duration", ms(x.duration_us)),
            ("events", f"{x.event_count:,}" if x.is_stream else None),
            ("gap median / p95 / max", _trio(x.gap_median_us, x.gap_p95_us, x.gap_max_us)),
            ("tokens/s", None if x.tokens_per_s is None else f"{x.tokens_per_s:.1f}"),
            ("tokens in / out / total", _usage(x.input_tokens, x.output_tokens, x.total_tokens)),
            (
                "cache read / write, reasoning",
                _usage(x.cache_read_tokens, x.cache_write_tokens, x.reasoning_tokens),
            ),
            (
                "cost",
                price_line(
                    x.cost_nusd,
                    provider=x.price_provider,
                    model=x.price_model,
                    note=x.price_note,
                    data=x.price_data,
                ),
            ),
            ("recorder", x.recorder),
            ("uid", x.uid),
        ]
        return el(
            "dl",
            join(el("dt", k) + el("dd", v) for k, v in facts if v not in (None, "")),
            class_="facts",
            id="facts",
        )

    def _request(self) -> Markup:
        x = self.x
        return el(
            "section",
            el("h2", "Request"),
            el("p", el("code", x.method, " ", url_of(x), class_="url")),
            _headers(x.request_headers),
            _body("request body", self.bodies()[0]),
            id="request",
        )

    def response(self) -> Markup:
        x = self.x
        status = "no response" if x.status is None else f"{x.status} {x.reason or ''}"
        return el(
            "section",
            el("h2", "Response"),
            el("p", el("code", status), id="status"),
            _headers(x.response_headers),
            _body("response body", self.bodies()[1]),
            id="response",
        )

    def _said(self) -> Markup:
        x = self.x
        details = x.details or {}
        # A session's text is read by its turns, not by an HTTP API's rules: no play button.
        plays = x.is_stream and not is_session(x)
        parts = [
            el("h2", "Output"),
            el("pre", cut(x.output_text or ""), id="output", class_="text"),
            el(
                "div",
                el(
                    "button", "▶ play", type="button", id="play", data_src=f"/exchanges/{x.id}/play"
                ),
                el("select", *(el("option", f"{n}x", value=n) for n in (1, 2, 10)), id="speed"),
                el("span", "", id="play-state"),
                class_="play",
            )
            if plays
            else "",
            el("pre", "", id="play-out", class_="text") if plays else "",
        ]
        for name, key in (("Refusal", "refusal_text"), ("Reasoning", "reasoning_text")):
            if details.get(key):
                parts += [el("h3", name), el("pre", cut(str(details[key])), class_="text")]
        calls = details.get("tool_calls")
        if calls:
            parts += [el("h3", "Tool calls"), el("pre", cut(_pretty_json(calls)), class_="json")]
        return el("section", *parts, id="said")

    def findings(self, findings: list[Finding], shown: set[int]) -> Markup:
        items = []
        for f in findings:
            where: object = ""
            if f.event_seq is not None:
                anchor = f"#event-{f.event_seq}"
                href = anchor if f.event_seq in shown else f"?after={f.event_seq - 1}{anchor}"
                where = link(href, f"event {f.event_seq}")
            items.append(el("li", el("code", f.code), " ", where, " ", f.detail))
        return el(
            "section",
            el("h2", f"Findings ({len(findings)})"),
            el("ol", *items) if items else el("p", "none"),
            id="findings",
        )

    def _timeline(self) -> Markup:
        # Fetched by the page's script once the first screen is shown: drawing it reads every
        # event (a third of a second for 100,000), the first screen reads one page.
        x = self.x
        zoom = el(
            "p",
            "zoom: ",
            *(
                el("button", f"{z}x", type="button", data_zoom=z, class_="zoom",
                   aria_pressed="true" if z == 1 else "false")
                for z in ZOOMS
            ),
            el("span", "wider, scroll sideways", class_="dim"),
            class_="zooms",
            id="zoom",
        )  # fmt: skip
        return el(
            "section",
            el("h2", "Timeline"),
            zoom,
            el(
                "div",
                el("p", "loading the timeline… ", link(f"/exchanges/{x.id}/download/svg", "(SVG)")),
                class_="timeline",
                id="timeline",
                data_src=f"/exchanges/{x.id}/timeline",
            ),
            id="timeline-section",
        )

    def _session(self) -> Markup:
        # Drawn with the page (the policy runs no script to fetch it later): one read of the
        # session's messages, its first TURNS_SHOWN turns kept, frames counted per pixel.
        tl = SessionTimeline.read(
            self.x, self.queries, cells=svg_cells(SVG_WIDTH), keep=TURNS_SHOWN
        )
        return session_section(tl)

    def _events(self, events: list[Event]) -> Markup:
        x, q = self.x, self.queries
        span = q.event_span(x.id)
        prev = q.event_span(x.id, stop=self.after + 1).last_offset_us if self.after >= 0 else None
        rows = event_rows(x.id, events, prev)
        last = events[-1] if events else None
        # The last page of a stream in flight grows as events are stored, and the page's figures,
        # output and timeline follow it to its end (see live.events_stream).
        live = x.state == ExchangeState.RECORDING and len(events) < EVENTS_PER_PAGE
        nav = []
        if self.after >= 0:
            nav.append(link("?#events", "← first events"))
        if len(events) == EVENTS_PER_PAGE:
            nav.append(link(f"?after={events[-1].seq}#events", "next events →", id="next-events"))
        shown = f"{len(events):,} of {span.count:,} events" + (
            f" from seq {events[0].seq}" if events else ""
        )
        return el(
            "section",
            el("h2", "Events"),
            el("p", shown, id="events-count"),
            el(
                "table",
                el("thead", el("tr", *(el("th", c) for c in _columns(x)))),
                el("tbody", *rows),
                class_="events",
                data_live=f"/exchanges/{x.id}/live?start={self.after}" if live else None,
                # Rows the live page keeps (the newest): app.js drops the oldest past it.
                data_keep=str(EVENTS_PER_PAGE) if live else None,
                data_after=str(last.seq if last else self.after),
                data_offset=str(last.offset_us if last else prev if prev is not None else ""),
            ),
            el("p", *nav, class_="pager"),
            id="events",
        )


def event_rows(exchange_id: int, events: list[Event], prev: int | None) -> list[Markup]:
    """The rows of ``events``; ``prev``: the offset of the event before the first, if any."""
    rows = []
    for e in events:
        gap = None if prev is None else e.offset_us - prev
        prev = e.offset_us
        rows.append(_event_row(exchange_id, e, gap))
    return rows


def _event_row(exchange_id: int, e: Event, gap: int | None) -> Markup:
    data = e.data if e.data is not None else e.raw.decode("utf-8", "replace")
    size = len(e.raw)
    cell: list[object] = [data[:DATA_SHOWN]]
    if len(data) > DATA_SHOWN:
        whole = f"/exchanges/{exchange_id}/events/{e.seq}"
        cell += [" … ", link(whole, f"cut at {DATA_SHOWN:,} characters: the whole")]
    label = e.event if e.event is not None else ("message" if e.data is not None else ":")
    return el(
        "tr",
        el("td", e.seq),
        el("td", ms(e.offset_us)),
        el("td", "" if gap is None else ms(gap)),
        # A WebSocket message: who sent it (the header says "from" for a session).
        el("td", e.direction, class_=f"from-{e.direction}") if e.direction is not None else "",
        el("td", label),
        el("td", f"{size:,} B"),
        el("td", el("code", *cell)),
        id=f"event-{e.seq}",
    )


_DOWNLOAD_LINKS = (("cassette", "cassette (JSONL)"), ("har", "HAR"), ("svg", "timeline (SVG)"))
# "since prev": the time since the previous stored event, keep-alives included; "gap" is the
# figure of docs/FIGURES.md (between content events) and is shown only as that.
_EVENT_COLUMNS = ("seq", "offset", "since prev", "type", "size", "data")


def _columns(x: Exchange) -> tuple[str, ...]:
    """The events table's columns: a session's messages also say who sent each."""
    return (*_EVENT_COLUMNS[:3], "from", *_EVENT_COLUMNS[3:]) if is_session(x) else _EVENT_COLUMNS


def _trio(a: int | None, b: int | None, c: int | None) -> str | None:
    return None if a is None and b is None and c is None else f"{ms(a)} / {ms(b)} / {ms(c)}"


def _usage(*counts: int | None) -> str | None:
    if all(c is None for c in counts):
        return None
    return " / ".join("-" if c is None else f"{c:,}" for c in counts)


def _headers(headers: list[list[str]] | None) -> Markup:
    if not headers:
        return el("p", "no headers", class_="dim")
    rows = [el("tr", el("th", k), el("td", v)) for k, v in headers[:HEADERS_SHOWN]]
    if len(headers) > HEADERS_SHOWN:
        rows.append(el("tr", el("td", f"… {len(headers) - HEADERS_SHOWN:,} more", colspan=2)))
    return el("table", *rows, class_="headers")


def _pretty_json(obj: Any) -> str:
    return orjson.dumps(obj, option=orjson.OPT_INDENT_2).decode()


def _body(what: str, body: BodyHead) -> Markup:
    if not body.size:
        return Markup("")
    text = body.head.decode("utf-8", "replace")
    if body.size <= len(body.head):  # the whole of it
        with contextlib.suppress(orjson.JSONDecodeError):
            text = _pretty_json(orjson.loads(body.head))
    else:
        text += f" … ({body.size - len(body.head):,} more bytes)"
    return el(
        "details",
        el("summary", f"{what} ({body.size:,} bytes)"),
        el("pre", text, class_="json"),
        class_="body",
    )
