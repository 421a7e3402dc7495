"""`ssetape stats` for people: the groups' figures as a table that fits a terminal."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.table import Table
from rich.text import Text

from ssetape.cost.price import NO_PRICE, format_usd
from ssetape.views.escape import cell

__all__ = ["stats_table"]


def _pair(d: dict[str, float | None]) -> str:
    return "/".join("-" if v is None else f"{v:.0f}" for v in (d["p50"], d["p95"]))


def _tps(r: dict[str, Any]) -> str:
    tps = r["tokens_per_s"]["p50"]
    return "-" if tps is None else f"{tps:.1f}"


def _seconds(ms: float | None) -> str:
    return "-" if ms is None else f"{ms / 1000:.2f}"


# `ssetape stats` columns: header, cell. A session's own times (see Stats.groups) replace
# TTFB and tokens per second there, so that a row still fits 80 columns.
_STATS: list[tuple[str, Callable[[dict[str, Any]], str | Text]]] = [
    ("n", lambda r: str(r["count"])),
    ("failed", lambda r: f"{r['failed']} {100 * r['failed_rate']:.0f}%"),
    ("ttfb p50/95", lambda r: _pair(r["ttfb_ms"])),
    ("ttft p50/95", lambda r: _pair(r["ttft_ms"])),
    ("tok in", lambda r: f"{r['input_tokens']:,}"),
    ("tok out", lambda r: f"{r['output_tokens']:,}"),
    ("tok/s", _tps),
    ("cost", lambda r: _group_cost(r)),
    ("wall s", lambda r: _seconds(r["wall_ms"])),
    ("ttft sum s", lambda r: _seconds(r["ttft_total_ms"])),
]
_SESSION_ONLY = frozenset({"wall s", "ttft sum s"})
_ROOM_FOR_OWN = 90  # columns that hold ssetape's own failures beside the figures
_NOT_FOR_SESSIONS = frozenset({"ttfb p50/95", "tok/s"})


def stats_table(
    rows: list[dict[str, Any]], by: str | None, width: int = 80, *, fault: str = "provider"
) -> Table:
    """`ssetape stats` for people: one row per group (see Stats.groups); the group's name
    takes what a terminal ``width`` wide leaves beside the figures (Bedrock's model ids share
    long prefixes: cut too soon, two read the same). ``fault``: whose failures ``failed``
    counts; ssetape's own get a column when they are not counted there, the others a note."""
    t = Table(box=None, header_style="bold", collapse_padding=True, pad_edge=False)
    t.add_column(by or "group", no_wrap=True, overflow="ellipsis", max_width=max(15, width - 100))
    skip = _NOT_FOR_SESSIONS if by == "session" else _SESSION_ONLY
    columns = [(head, fn) for head, fn in _STATS if head not in skip]
    own = fault not in ("ssetape", "any") and any(r["faults"]["ssetape"] for r in rows)
    # Beside "failed": what the recorder itself failed, where the terminal has room for it
    # (the figures fill 80 columns); else the note below names it with the others.
    own = own and width >= _ROOM_FOR_OWN
    if own:
        columns.insert(2, ("ssetape", lambda r: str(r["faults"]["ssetape"])))
    # Figures keep their width (a cut one would read as another); the group name gives way.
    for head, _ in columns:
        t.add_column(
            head, justify="right", no_wrap=True, min_width=max(len(head), 10 * (head == "cost"))
        )
    notes = [_left_out(rows, fault, shown="ssetape" if own else None)]
    unpriced = sum(r["unpriced"] for r in rows if r["priced"])
    if unpriced:  # a caption costs no width; the star marks the rows it is about
        notes.append(f"* without the {unpriced:,} call(s) that have no price (show ID says why)")
    if any(notes):
        t.caption, t.caption_justify = "\n".join(n for n in notes if n), "left"
    for r in rows:
        t.add_row(cell(r["group"]), *(fn(r) for _, fn in columns))
    return t


def _left_out(rows: list[dict[str, Any]], fault: str, shown: str | None) -> str:
    """What ``failed`` leaves out: the failures of other faults (but a column's)."""
    if fault == "any" or not rows:
        return ""
    others = {f: sum(r["faults"][f] for r in rows) for f in rows[0]["faults"] if f != fault}
    named = ", ".join(f"{n:,} {f}" for f, n in others.items() if n and f != shown)
    return f"failed counts {fault}; not counted: {named} (--fault any)" * bool(named)


def _group_cost(r: dict[str, Any]) -> Text:
    """The group's sum, starred when it leaves calls out for want of a price."""
    if not r["priced"]:
        return Text(NO_PRICE, style="dim")
    return Text(f"{format_usd(r['cost_nusd'])}{'*' if r['unpriced'] else ''}")
