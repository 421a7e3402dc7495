"""`/`: the exchanges, newest first, narrowed by the filters in the URL, a keyset page at a time.

The URL is the view: ``?api=&model=&outcome=&fault=&host=&since=&q=`` and the timing ranges
``min_ttft=2s`` (and ``max_``, of duration, ttfb, ttft, gap) are the filters of `ssetape list`,
``sort=-duration`` its ``--sort`` (a column's header sets it), ``cursor=`` the page after the
one that gave it (``before=ID``: after exchange ID, newest first). A link reproduces what it
showed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ssetape.cost.price import NO_PRICE, format_usd
from ssetape.http_fields import DEFAULT_PORTS
from ssetape.storage.filters import RANGES, ExchangeFilter, parse_since, parse_span
from ssetape.storage.models import Exchange
from ssetape.storage.page_reads import ListRow
from ssetape.storage.queries import Queries
from ssetape.storage.sorted_pages import Sort, SortedPages
from ssetape.storage.text_matches import TextMatch, TextMatches
from ssetape.vocabulary import (
    ExchangeState,
    Outcome,
    fault_choices,
    outcome_choices,
    parse_fault,
    parse_outcome,
)
from ssetape.web.html import Markup, el, id_of, join, link, ms, page, query
from ssetape.web.session_page import session_href

__all__ = ["FILTER_PARAMS", "RANGE_PARAMS", "ListView", "row_html"]

# URL parameter -> the ExchangeFilter field it sets ("q" is the text filter: short in a URL).
FILTER_PARAMS = {
    "api": "api",
    "model": "model",
    "outcome": "outcome",
    "fault": "fault",
    "host": "host",
    "since": "since",
    "q": "text",
    "session": "session",
}
# The timing ranges, as `ssetape list --min-ttft 2s` (URL parameter = ExchangeFilter field).
RANGE_PARAMS = tuple(f"{end}_{key}" for key in RANGES for end in ("min", "max"))
PAGE_SIZE = 50
# Host over method and path, model over API, outcome over status: two lines a row, so the list
# fits a laptop's window (1280 px) with every column.
_COLUMNS = (
    "#", "time (UTC)", "request", "model / API", "outcome / status", "TTFB", "TTFT",
    "duration", "gap", "tokens in / out", "cost", "findings", "session",
)  # fmt: skip
# The columns whose header sorts the list: the key of SORT_KEYS it sorts by. A first click
# sorts descending (newest, slowest first), a click on the sorted column the other way.
_SORTS = {"time (UTC)": "started", "TTFB": "ttfb", "TTFT": "ttft", "duration": "duration",
          "gap": "gap"}  # fmt: skip
_TITLES = {"gap": "the longest pause between two events"}
# What a cell holds of a path, a model, a host or a session: the whole is in its title, and
# the stylesheet shows as much of it as its column's width (the list fits a laptop's window).
_CELL_MAX = 80
OUTCOMES = tuple(outcome_choices())
# The filters chosen from a list, with the values each offers.
_CHOICES = {"outcome": OUTCOMES, "fault": tuple(fault_choices())}
# What a row is made of: the list's columns (what the list reads), or a whole exchange.
Row = ListRow | Exchange


@dataclass(frozen=True)
class ListView:
    """What a list URL asks for."""

    params: dict[str, str]  # the filter parameters as given (kept in links)
    filters: ExchangeFilter
    error: str | None = None
    sort: Sort = field(default_factory=Sort)
    cursor: str | None = None  # where the page starts, as the previous one's link gave it
    # A sort or cursor the list cannot read: the page is a 400 naming it (not an unsorted
    # list that looks like the one asked for).
    refused: str | None = None

    @classmethod
    def parse(cls, args: Mapping[str, str]) -> ListView:
        """The filters of a URL's query; a bad one is named on the page, the rest apply."""
        params = {
            k: args[k].strip() for k in (*FILTER_PARAMS, *RANGE_PARAMS) if args.get(k, "").strip()
        }
        values: dict[str, object] = {FILTER_PARAMS.get(k, k): v for k, v in params.items()}
        errors = []
        if "since" in params:
            try:
                values["since"] = parse_since(params["since"])
            except ValueError as e:
                errors.append(str(e).replace("--since", "since"))
                del values["since"]
        for name in RANGE_PARAMS:
            try:
                if name in params:  # 250ms, 2s, 1.5s: as `ssetape list --min-ttft` reads it
                    values[name] = parse_span(params[name], option=name)
            except ValueError as e:
                errors.append(str(e))
                del values[name]
        for name, parse in (("outcome", parse_outcome), ("fault", parse_fault)):
            try:
                if name in params:
                    parse(params[name])
            except ValueError as e:
                # Not a silent empty list: a value no exchange can have is named, with the
                # valid ones.
                errors.append(str(e))
                del values[name]
        before = id_of(args.get("before", ""))
        error = "; ".join(errors) or None
        filters = ExchangeFilter(**values)  # type: ignore[arg-type]
        cursor = args.get("cursor", "").strip() or None
        try:
            sort = Sort.parse(args.get("sort"), option="sort")  # the CLI's --sort, its message
            if cursor is not None:
                sort.after(cursor)
        except ValueError as e:
            return cls(params, filters, error, refused=str(e))
        if cursor is None and before is not None and sort.newest_first:
            cursor = str(before)  # a link made before there were cursors: the same page
        return cls(params, filters, error, sort, cursor)

    def render(self, queries: Queries) -> str:
        # The list's columns only: a row's bodies may be megabytes each.
        rows = SortedPages(queries.store).list_rows(
            self.filters, self.sort, limit=PAGE_SIZE, cursor=self.cursor
        )
        counts = queries.finding_counts([x.id for x in rows])
        found = self.matches(queries, [x.id for x in rows])
        standby = queries.standby()
        body = self._table(
            [row_html(x, counts.get(x.id, 0), found.get(x.id)) for x in rows],
            max((x.id for x in rows), default=queries.last_id()),
            # Read through a hot standby (--read-db): how current this page is.
            el("p", standby.describe(), class_="standby") if standby is not None else "",
        )
        if not rows:
            body.append(el("p", "no exchanges match", class_="empty", id="empty"))
        if len(rows) == PAGE_SIZE:
            # The same filters and order, from the last row on (`ssetape list --cursor`).
            after = self._href(self.sort, cursor=self.sort.cursor(rows[-1]))
            label = "older →" if self.sort.newest_first else "next →"
            body.append(el("p", link(after, label, rel="next", id="older")))
        return page("ssetape: exchanges", *body)

    def _href(self, sort: Sort, cursor: str | None = None) -> str:
        """This list in ``sort``'s order (its first page unless ``cursor``)."""
        shown = None if sort.newest_first else str(sort)
        return f"/{query({**self.params, 'sort': shown, 'cursor': cursor})}"

    def matches(self, queries: Queries, ids: list[int]) -> dict[int, TextMatch]:
        """With ``q``: where each row has the text, and the text around it."""
        text = self.filters.text
        return TextMatches(queries.store).around(ids, text) if text else {}

    def render_waiting(self, path: Path, problem: str | None = None) -> str:
        """The list of a store no recorder has created yet: empty, and live (its first rows
        come as the store is recorded into); ``problem``: why the file, if there, is not read
        yet."""
        empty = el(
            "p",
            "nothing recorded yet: waiting for ",
            el("code", str(path.absolute())),
            " to be created by a recorder (",
            el("code", "ssetape record --db"),
            "); this list fills as it records",
            class_="empty",
            id="empty",
        )
        note = el("p", "not readable yet: ", problem, class_="dim") if problem else ""
        return page("ssetape: exchanges", *self._table([], 0), empty, note)

    def _table(self, rows: list[Markup], after: int, *above: Markup | str) -> list[object]:
        return [
            el("h1", "Exchanges"),
            *above,
            self._form(),
            el("p", self.error, class_="error", id="filter-error") if self.error else "",
            el(
                "table",
                el("thead", el("tr", *(self._header(c) for c in _COLUMNS))),
                el("tbody", *rows, id="rows"),
                class_="exchanges",
                # The live stream follows the first page only, newest first (where a new
                # exchange goes), with the same filters.
                data_live=f"/live{query(self.params)}"
                if self.cursor is None and self.sort.newest_first
                else None,
                data_after=str(after),
            ),
        ]

    def _header(self, column: str) -> Markup:
        """A column's header; a timing's (and the time's) a link that sorts by it, marked
        (aria-sort, an arrow) when the list is sorted by it."""
        key = _SORTS.get(column)
        if key is None:
            return el("th", column)
        active = self.sort.key == key
        # The sorted column's link turns the order round; another's sorts by it, descending.
        then = Sort(key, not self.sort.descending) if active else Sort(key)
        way = "descending" if self.sort.descending else "ascending"
        arrow = (" ↓" if self.sort.descending else " ↑") if active else ""
        title = f"{_TITLES.get(column, column)}: sort {'de' if then.descending else 'a'}scending"
        return el(
            "th",
            link(self._href(then), column, arrow, id=f"sort-{key}", title=title),
            aria_sort=way if active else None,
            class_="sorted" if active else None,
        )

    def _form(self) -> Markup:
        fields = [
            el("label", name, self._choice(name))
            if name in _CHOICES
            else el(
                "label", name, el("input", name=name, value=self.params.get(name, ""), size="12")
            )
            for name in FILTER_PARAMS
        ]
        ranges = [
            el("label", key, el("span", *(
                el("input", name=f"{end}_{key}", value=self.params.get(f"{end}_{key}", ""),
                   placeholder=end, size="4", aria_label=f"{end} {key}",
                   title="a time: 250ms, 2s, 1.5s")
                for end in ("min", "max")
            ), class_="range"))
            for key in RANGES
        ]  # fmt: skip
        # The order is kept as the filters change (the headers change it).
        order = "" if self.sort.newest_first else str(self.sort)
        return el(
            "form",
            *fields,
            *ranges,
            el("input", type="hidden", name="sort", value=order) if order else "",
            el("button", "filter", type="submit"),
            link("/", "clear"),
            method="get",
            action="/",
            class_="filters",
        )

    def _choice(self, name: str) -> Markup:
        """A filter chosen from a list (the outcomes, the faults): a URL's unknown value is
        kept, and named as the page's error."""
        chosen = self.params.get(name, "")
        known = ["", *_CHOICES[name]]
        return el(
            "select",
            *(
                el("option", o or "all", value=o, selected=o == chosen)
                for o in (known if chosen in known else [*known, chosen])
            ),
            name=name,
        )


def _cut(text: str | None, column: str) -> Markup:
    text = text or ""
    shown = text if len(text) <= _CELL_MAX else text[:_CELL_MAX] + "…"
    return el("span", shown, title=text or None, class_=f"cell {column}")


def _cost(x: Row) -> Markup | str:
    """The price, or "no price" with the reason in its title; blank when never priced."""
    if x.price_data is None:
        return ""
    if x.cost_nusd is None:
        return el("span", NO_PRICE, title=x.price_note, class_="dim")
    return el("span", format_usd(x.cost_nusd), title=x.price_note)


def _host(x: Row) -> str:
    """The host as a URL names it: with its port unless that is the scheme's own."""
    return x.host if DEFAULT_PORTS.get(x.scheme) == x.port else f"{x.host}:{x.port}"


def _mark(x: Row) -> str:
    """How the row's state reads at a glance: ok (completed), live (in flight), or bad
    (any other outcome: cut, refused, incomplete, an HTTP error... or an ending without one)."""
    if x.state == ExchangeState.RECORDING:
        return "live"
    if x.outcome == Outcome.COMPLETED or (not x.outcome and x.state == ExchangeState.COMPLETED):
        return "ok"
    return "bad"


def _status(x: Row) -> str:
    """The HTTP status, and how the transport ended when that tells more than the outcome
    (``200 truncated``: the upstream cut it)."""
    shown = "no response" if x.status is None else str(x.status)
    if x.outcome and x.state not in (x.outcome, ExchangeState.COMPLETED):
        shown += f" {x.state}"
    return shown


def _match(m: TextMatch | None) -> Markup | str:
    """Where ``q`` is in the exchange and the text around it, under its request."""
    if m is None:
        return ""
    return el(
        "span", f"{m.where.value}: ", m.before, el("mark", m.hit), m.after, class_="cell match"
    )


def row_html(x: Row, findings: int, match: TextMatch | None = None) -> Markup:
    """One exchange as a row of the list (also what the live stream sends); ``match``: where
    the list's ``q`` is in it."""
    href = f"/exchanges/{x.id}"
    mark = _mark(x)
    tokens = (
        ""
        if x.input_tokens is None and x.output_tokens is None
        else f"{x.input_tokens if x.input_tokens is not None else '?'}"
        f" / {x.output_tokens if x.output_tokens is not None else '?'}"
    )
    cells = [
        link(href, x.id),
        # The year is in the title: the column stays narrow.
        link(
            href,
            x.started_at.strftime("%m-%d %H:%M:%S.%f")[:-3],
            title=x.started_at.isoformat(sep=" ", timespec="milliseconds"),
        ),
        _cut(_host(x), "host") + _cut(f"{x.method} {x.path}", "path") + _match(match),
        _cut(x.model, "model") + _cut(x.api, "api"),
        el(
            "span",
            x.outcome or x.state,
            class_=f"state {mark} {x.outcome or x.state}",
            title=f"state {x.state}, outcome {x.outcome or '-'}"
            + (": not completed" if mark == "bad" else ""),
        )
        + el("span", _status(x), class_="cell status"),
        ms(x.ttfb_us),
        ms(x.ttft_us),
        ms(x.duration_us),
        ms(x.gap_max_us),
        tokens,
        _cost(x),
        link(f"{href}#findings", findings) if findings else "",
        "" if x.session is None else link(session_href(x.session), _cut(x.session, "session")),
    ]
    return el(
        "tr",
        join(el("td", c) for c in cells),
        data_id=str(x.id),
        data_state=x.state,
        data_outcome=x.outcome,
        data_mark=mark,
    )
