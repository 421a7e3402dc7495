"""`ssetape stats` and `ssetape reindex`: answers about what was recorded."""

from __future__ import annotations

import sys
from typing import Any

import click
from rich.console import Console
from rich.progress import Progress

from ssetape.analysis.knowledge import Knowledge
from ssetape.analysis.stats import GROUP_BY, Stats
from ssetape.cli.options import (
    db_option,
    filter_options,
    open_db,
    price_data_option,
    print_json,
    profile_option,
)
from ssetape.cost.price_book import LazyPriceBook
from ssetape.storage.filters import ExchangeFilter
from ssetape.storage.runs import Runs
from ssetape.storage.store import Store
from ssetape.views.tables import runs_table, stats_table


def _losses(store: Store) -> dict[str, Any] | None:
    """What recorders could not store (their run counters), if the store has any runs."""
    totals = Runs(store).totals()
    return totals if totals.get("runs") else None


@click.command()
@db_option
@click.option("--by", type=click.Choice(sorted(GROUP_BY)), help="One row per model, host, ...")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array, one object per group.")
@click.option(
    "--runs",
    is_flag=True,
    help="What each recorder stored and lost instead (with --json: one object, the sums and "
    "a list of runs).",
)
@filter_options
@click.option("--host", help="Only this host.")
def stats(db: str, by: str | None, as_json: bool, runs: bool, **filters: Any) -> None:
    """Count, error rate, TTFB/TTFT p50/p95, tokens and tokens/s, per group."""
    store = open_db(db)
    try:
        rows = Stats(store).groups(by, ExchangeFilter.pop(filters))
        losses = _losses(store)
    finally:
        store.close()
    if runs:
        totals = losses or {"runs": []}
        if as_json:
            print_json(totals)
        else:
            Console().print(runs_table(totals["runs"]))
        return
    if as_json:
        print_json(rows)
        return
    console = Console()
    if not rows:
        console.print("no exchanges match")
    else:
        console.print(stats_table(rows, by))
    if losses is not None:
        n = len(losses["runs"])
        if losses["events_lost"] or losses["exchanges_lost"] or losses["store_errors"]:
            console.print(
                f"recorders: {n} run(s); could not store {losses['events_lost']} events "
                f"and {losses['exchanges_lost']} exchanges ({losses['store_errors']} store errors)",
                style="red",
            )
        else:
            console.print(f"recorders: {n} run(s), nothing lost (ssetape stats --runs)")


@click.command()
@db_option
@click.option("--stale", is_flag=True, help="Only exchanges not analysed by this version yet.")
@profile_option
@price_data_option
def reindex(db: str, stale: bool, profiles: dict[str, str], price_data: str) -> None:
    """Recompute the stream knowledge (api, model, outcome, usage, timing, findings) and
    each exchange's price at the rates of its day.

    Each exchange is read under the profile it was recorded with (its host's, for stores
    older than profiles), unless --profile names its host. --stale also takes exchanges
    priced with other price data than this run's."""
    store = open_db(db)
    try:
        knowledge = Knowledge(store, profiles=profiles, prices=LazyPriceBook(price_data or None))
        ids = knowledge.exchange_ids(stale_only=stale)
        with Progress(console=Console(stderr=True), disable=not sys.stderr.isatty()) as bar:
            task = bar.add_task("reindex", total=len(ids))
            done = knowledge.reanalyse(ids, progress=lambda n: bar.advance(task, n))
    finally:
        store.close()
    click.echo(f"reindexed {done} exchange(s), priced with {knowledge.prices().version}")
