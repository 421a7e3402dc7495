"""`/stats`: the groups of `ssetape stats` as a table, their TTFB and TTFT spread as charts, and
exchanges and failures over time.

The URL is the view: ``?by=model|host|api|outcome|status``, ``?fault=`` (whose failures the
failed count, the error rate and the chart count: the provider's unless it says another, or
any) and the list's other filters (``?api=&model=&outcome=&host=&since=&q=``). The table is
:class:`ssetape.analysis.stats.Stats`'s, the figures `ssetape stats --json` prints; the charts
read the same exchanges through :meth:`ssetape.storage.queries.Queries.stat_series`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ssetape.analysis.stats import GROUP_BY, Stats, percentile
from ssetape.cost.price import NO_PRICE, format_usd
from ssetape.storage.queries import Queries, SeriesRow
from ssetape.vocabulary import (
    DEFAULT_FAULT,
    counted_fault,
    fault_choices,
    faults_of,
    is_failed,
    parse_fault,
)
from ssetape.web.charts import Bucket, Spread, distribution_chart, time_chart
from ssetape.web.html import Markup, el, join, link, page, query
from ssetape.web.list_page import FILTER_PARAMS, ListView

__all__ = ["CHART_GROUPS", "StatsView"]

# Groups drawn in a chart (the most exchanges first); the table lists them all.
CHART_GROUPS = 20
# The bucket sizes of the time chart (seconds): the smallest that makes at most _BUCKETS.
_STEPS = (
    1,
    2,
    5,
    10,
    15,
    30,
    60,
    120,
    300,
    600,
    900,
    1800,
    3600,
    7200,
    10800,
    21600,
    43200,
    86400,
    2 * 86400,
    7 * 86400,
    14 * 86400,
    30 * 86400,
    91 * 86400,
    365 * 86400,
)
_BUCKETS = 60
_COLUMNS = (
    "group",
    "exchanges",
    "failed",
    "error rate",
    "TTFB p50",
    "TTFB p95",
    "TTFT p50",
    "TTFT p95",
    "tokens in",
    "tokens out",
    "usage reported",
    "tokens/s p50",
    "cost",
    "failed by fault",
)
# What a cell shows of a group's name (a model or host can be long): the whole is its title.
_NAME_SHOWN = 60
# A group's list link: the list filter that selects it, where there is one.
_LIST_FILTER = {"model": "model", "host": "host", "api": "api", "outcome": "outcome"}


@dataclass
class _Values:
    ttfb: list[int] = field(default_factory=list)
    ttft: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class StatsView:
    """What a stats URL asks for: a grouping, whose failures count, and the list's filters."""

    by: str | None
    listing: ListView
    fault: str = DEFAULT_FAULT
    error: str | None = None  # a fault no failure can have, named

    @classmethod
    def parse(cls, args: Mapping[str, str]) -> StatsView:
        by = args.get("by", "").strip()
        # Here whose failures count, not which exchanges: the list's filter of it is left out.
        fault, error = args.get("fault", "").strip() or DEFAULT_FAULT, None
        try:
            parse_fault(fault)
        except ValueError as e:
            fault, error = DEFAULT_FAULT, str(e)
        listing = ListView.parse({k: v for k, v in args.items() if k != "fault"})
        return cls(by if by in GROUP_BY else None, listing, str(fault), error)

    @property
    def params(self) -> dict[str, str]:
        """The filters, and the fault when it is not the default, as links keep them."""
        fault = {} if self.fault == DEFAULT_FAULT else {"fault": self.fault}
        return {**self.listing.params, **fault}

    def render(self, queries: Queries) -> str:
        filters = self.listing.filters
        groups = Stats(queries.store).groups(self.by, filters, self.fault)
        values, buckets, step = self._series(queries.stat_series(self.by, filters))
        chart_groups = groups[:CHART_GROUPS]
        more = (
            el("p", f"charts: the {CHART_GROUPS} largest of {len(groups):,} groups", class_="dim")
            if len(groups) > CHART_GROUPS
            else ""
        )
        body = [
            el("h1", "Stats"),
            self._tabs(),
            self._form(),
            *(el("p", e, class_="error") for e in (self.listing.error, self.error) if e),
            el(
                "table",
                el("thead", el("tr", *(el("th", c) for c in _COLUMNS))),
                el("tbody", *(self._row(g) for g in groups)),
                class_="stats",
                id="groups",
            ),
            el("p", "no exchanges match", class_="empty") if not groups else "",
            el("h2", "TTFB per group"),
            more,
            distribution_chart(_spreads(chart_groups, values, "ttfb"), "TTFB"),
            el("h2", "TTFT per group"),
            distribution_chart(_spreads(chart_groups, values, "ttft"), "TTFT"),
            el("h2", "Exchanges and failures over time"),
            time_chart(buckets, step),
            el("p", "box: p50 to p95 (bold line: p50); whiskers: lowest to highest", class_="dim"),
        ]
        return page("ssetape: stats", *body)

    def _series(
        self, rows: Iterable[SeriesRow]
    ) -> tuple[dict[str, _Values], list[Bucket], dt.timedelta]:
        values: dict[str, _Values] = {}
        starts: list[tuple[float, bool]] = []
        chosen = faults_of(self.fault)
        for r in rows:
            name = _group_name(self.by, r.group)
            v = values.get(name) or values.setdefault(name, _Values())
            if r.ttfb_us is not None:
                v.ttfb.append(r.ttfb_us)
            if r.ttft_us is not None:
                v.ttft.append(r.ttft_us)
            # Failed, and of the faults the failed column counts.
            bad = is_failed(r.outcome, r.status, r.state)
            starts.append((_epoch(r.started_at), bad and counted_fault(r.fault, r.state) in chosen))
        return (values, *_buckets(starts))

    def _tabs(self) -> Markup:
        params = self.params
        tabs: list[Markup] = []
        for by in (None, *sorted(GROUP_BY)):
            label = "all" if by is None else f"by {by}"
            if by == self.by:
                tabs.append(el("strong", label))
            else:
                tabs.append(link(f"/stats{query({**params, 'by': by})}", label))
        return el("p", *tabs, class_="tabs", id="by")

    def _form(self) -> Markup:
        fields = [
            el(
                "label",
                name,
                el("input", name=name, value=self.listing.params.get(name, ""), size="14"),
            )
            for name in FILTER_PARAMS
            if name != "fault"
        ]
        whose = el(
            "select",
            *(el("option", f, value=f, selected=f == self.fault) for f in fault_choices()),
            name="fault",
        )
        return el(
            "form",
            el("input", type="hidden", name="by", value=self.by) if self.by else "",
            *fields,
            el("label", "failed: fault", whose),
            el("button", "filter", type="submit"),
            link(f"/stats{query({'by': self.by})}", "clear"),
            link(f"/{query(self.listing.params)}", "these exchanges →"),
            method="get",
            action="/stats",
            class_="filters",
        )

    def _row(self, g: dict[str, Any]) -> Markup:
        name = str(g["group"])
        param = _LIST_FILTER.get(self.by or "")
        cut = name if len(name) <= _NAME_SHOWN else name[:_NAME_SHOWN] + "…"
        shown: object = el("span", cut, title=name if cut != name else None)
        if param and name != "-":
            shown = link(f"/{query({**self.listing.params, param: name})}", shown)
        cells = [
            shown,
            f"{g['count']:,}",
            f"{g['failed']:,}",
            f"{g['failed_rate'] * 100:.1f} %",
            _ms(g["ttfb_ms"]["p50"]),
            _ms(g["ttfb_ms"]["p95"]),
            _ms(g["ttft_ms"]["p50"]),
            _ms(g["ttft_ms"]["p95"]),
            f"{g['input_tokens']:,}",
            f"{g['output_tokens']:,}",
            f"{g['usage_reported']:,}",
            "" if g["tokens_per_s"]["p50"] is None else f"{g['tokens_per_s']['p50']:.1f}",
            _cost(g),
            " · ".join(f"{f} {n:,}" for f, n in g["faults"].items() if n),
        ]
        return el("tr", join(el("td", c) for c in cells), data_group=name)


def _cost(g: dict[str, Any]) -> Markup:
    """The sum over the group's priced calls (exact nano-dollars in data-value), and how many
    it leaves out; "no price", never $0, when none has one."""
    left_out = f" (+{g['unpriced']:,} {NO_PRICE})" if g["priced"] and g["unpriced"] else ""
    return el("span", format_usd(g["cost_nusd"]) + left_out, data_value=g["cost_nusd"] or "")


def _group_name(by: str | None, value: Any) -> str:
    # As Stats.groups names them, so a chart's rows are the table's.
    return "all" if by is None else ("-" if value is None else str(value))


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value:,.1f} ms"


def _epoch(when: dt.datetime) -> float:
    # Stored times are UTC; SQLite gives them back without a zone.
    return (when if when.tzinfo else when.replace(tzinfo=dt.UTC)).timestamp()


def _spreads(groups: list[dict[str, Any]], values: dict[str, _Values], what: str) -> list[Spread]:
    out = []
    for g in groups:
        v = values.get(str(g["group"]))
        measured: list[int] = getattr(v, what) if v else []
        if not measured:
            continue
        p50, p95 = percentile(measured, 50), percentile(measured, 95)
        assert p50 is not None and p95 is not None
        out.append(
            Spread(
                str(g["group"]), len(measured), min(measured), round(p50), round(p95), max(measured)
            )
        )
    return out


def _buckets(starts: list[tuple[float, bool]]) -> tuple[list[Bucket], dt.timedelta]:
    """Exchanges and errors per bucket, from the first exchange's bucket to the last's."""
    if not starts:
        return [], dt.timedelta(seconds=1)
    first, last = min(t for t, _ in starts), max(t for t, _ in starts)
    step = next((s for s in _STEPS if (last - first) / s < _BUCKETS), _STEPS[-1])
    origin = first // step * step
    n = int((last - origin) // step) + 1
    requests, errors = [0] * n, [0] * n
    for t, bad in starts:
        i = min(n - 1, int((t - origin) // step))
        requests[i] += 1
        errors[i] += bad
    buckets = [
        Bucket(dt.datetime.fromtimestamp(origin + i * step, dt.UTC), requests[i], errors[i])
        for i in range(n)
    ]
    return buckets, dt.timedelta(seconds=step)
