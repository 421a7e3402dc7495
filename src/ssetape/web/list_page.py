"""`/`: the exchanges, newest first, narrowed by the filters in the URL, a keyset page at a time.

The URL is the view: ``?api=&model=&outcome=&host=&since=&q=`` are the filters of
`ssetape list`, ``before=ID`` the page after exchange ID. A link reproduces what it showed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ssetape.cost.price import NO_PRICE, format_usd
from ssetape.storage.filters import ExchangeFilter, parse_since
from ssetape.storage.models import Exchange
from ssetape.storage.queries import Queries
from ssetape.web.html import Markup, el, id_of, join, link, ms, page, query
from ssetape.web.session_page import session_href

__all__ = ["FILTER_PARAMS", "ListView", "row_html"]

# URL parameter -> the ExchangeFilter field it sets ("q" is the text filter: short in a URL).
FILTER_PARAMS = {
    "api": "api",
    "model": "model",
    "outcome": "outcome",
    "host": "host",
    "since": "since",
    "q": "text",
    "session": "session",
}
PAGE_SIZE = 50
_COLUMNS = (
    "#", "time (UTC)", "method", "host", "path", "api", "model", "state / outcome", "status",
    "TTFB", "TTFT", "duration", "tokens in/out", "cost", "findings", "session",
)  # fmt: skip
# What a cell shows of a path, a model or a host: the whole is in its title.
_CELL_MAX = 80


@dataclass(frozen=True)
class ListView:
    """What a list URL asks for."""

    params: dict[str, str]  # the filter parameters as given (kept in links)
    filters: ExchangeFilter
    before: int | None
    error: str | None = None

    @classmethod
    def parse(cls, args: Mapping[str, str]) -> ListView:
        """The filters of a URL's query; a bad one is named on the page, the rest apply."""
        params = {k: args[k].strip() for k in FILTER_PARAMS if args.get(k, "").strip()}
        values: dict[str, object] = {FILTER_PARAMS[k]: v for k, v in params.items()}
        error = None
        if "since" in params:
            try:
                values["since"] = parse_since(params["since"])
            except ValueError as e:
                error = str(e).replace("--since", "since")
                del values["since"]
        before_text = args.get("before", "")
        before = id_of(before_text)
        return cls(params, ExchangeFilter(**values), before, error)  # type: ignore[arg-type]

    def render(self, queries: Queries) -> str:
        rows = queries.exchanges(self.filters, limit=PAGE_SIZE, before=self.before)
        counts = queries.finding_counts([x.id for x in rows])
        standby = queries.standby()
        body = [
            el("h1", "Exchanges"),
            # Read through a hot standby (--read-db): how current this page is.
            el("p", standby.describe(), class_="standby") if standby is not None else "",
            self._form(),
            el("p", self.error, class_="error") if self.error else "",
            el(
                "table",
                el("thead", el("tr", *(el("th", c) for c in _COLUMNS))),
                el("tbody", *(row_html(x, counts.get(x.id, 0)) for x in rows), id="rows"),
                class_="exchanges",
                # The live stream follows the first page only, with the same filters.
                data_live=f"/live{query(self.params)}" if self.before is None else None,
                data_after=str(max((x.id for x in rows), default=queries.last_id())),
            ),
        ]
        if not rows:
            body.append(el("p", "no exchanges match", class_="empty", id="empty"))
        if len(rows) == PAGE_SIZE:
            older = query({**self.params, "before": rows[-1].id})
            body.append(el("p", link(f"/{older}", "older →", rel="next", id="older")))
        return page("ssetape: exchanges", *body)

    def _form(self) -> Markup:
        fields = [
            el(
                "label",
                name,
                el("input", name=name, value=self.params.get(name, ""), size="14"),
            )
            for name in FILTER_PARAMS
        ]
        return el(
            "form",
            *fields,
            el("button", "filter", type="submit"),
            link("/", "clear"),
            method="get",
            action="/",
            class_="filters",
        )


def _cut(text: str | None) -> Markup:
    text = text or ""
    shown = text if len(text) <= _CELL_MAX else text[:_CELL_MAX] + "…"
    return el("span", shown, title=text if shown != text else None)


def _cost(x: Exchange) -> Markup | str:
    """The price, or "no price" with the reason in its title; blank when never priced."""
    if x.price_data is None:
        return ""
    if x.cost_nusd is None:
        return el("span", NO_PRICE, title=x.price_note, class_="dim")
    return el("span", format_usd(x.cost_nusd), title=x.price_note)


def row_html(x: Exchange, findings: int) -> Markup:
    """One exchange as a row of the list (also what the live stream sends)."""
    href = f"/exchanges/{x.id}"
    state = x.state if not x.outcome or x.outcome == x.state else f"{x.state} / {x.outcome}"
    tokens = (
        ""
        if x.input_tokens is None and x.output_tokens is None
        else f"{x.input_tokens if x.input_tokens is not None else '?'}"
        f" / {x.output_tokens if x.output_tokens is not None else '?'}"
    )
    cells = [
        link(href, x.id),
        link(href, x.started_at.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]),
        x.method,
        _cut(x.host),
        _cut(x.path),
        x.api or "",
        _cut(x.model),
        el("span", state, class_=f"state {x.outcome or x.state}"),
        "" if x.status is None else x.status,
        ms(x.ttfb_us),
        ms(x.ttft_us),
        ms(x.duration_us),
        tokens,
        _cost(x),
        link(f"{href}#findings", findings) if findings else "",
        "" if x.session is None else link(session_href(x.session), _cut(x.session)),
    ]
    return el(
        "tr",
        join(el("td", c) for c in cells),
        data_id=str(x.id),
        data_state=x.state,
    )
