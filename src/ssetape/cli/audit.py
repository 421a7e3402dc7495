"""`ssetape stats`, `ssetape reindex` and `ssetape prune`: answers about what was recorded,
and what to keep of it."""

from __future__ import annotations

import datetime as dt
import sys
from typing import TYPE_CHECKING, Any

import click

from ssetape.analysis.stats import GROUP_BY
from ssetape.cli.options import (
    TimeParam,
    db_option,
    fault_count_option,
    open_db,
    open_reader,
    price_data_option,
    print_json,
    profile_option,
    reader_options,
    standby_note,
    stat_filter_options,
)
from ssetape.storage.prune import BATCH_ROWS

# What one command needs is imported in it: `stats` does not pay for the analyser and the
# price book of `reindex` (genai-prices' data), nor rich's progress bars.
if TYPE_CHECKING:
    from ssetape.storage.store import Store


def _losses(store: Store) -> dict[str, Any] | None:
    """What recorders could not store (their run counters), if the store has any runs."""
    from ssetape.storage.runs import Runs

    totals = Runs(store).totals()
    return totals if totals.get("runs") else None


@click.command()
@reader_options
@click.option("--by", type=click.Choice(sorted(GROUP_BY)), help="One row per model, host, ...")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array, one object per group.")
@click.option(
    "--runs",
    is_flag=True,
    help="What each recorder stored and lost instead (with --json: one object, the sums and "
    "a list of runs).",
)
@stat_filter_options
@fault_count_option
@click.option("--host", help="Only this host.")
def stats(
    db: str, read_db: str | None, by: str | None, as_json: bool, runs: bool, fault: str,
    **filters: Any,
) -> None:  # fmt: skip
    """Count, failed count and rate, TTFB/TTFT p50/p95, tokens and tokens/s, per group.

    The failed count and rate are the provider's failures unless --fault says whose;
    ssetape's own (a recorder stopped or killed mid-stream) are shown beside them."""
    from rich.console import Console

    from ssetape.analysis.stats import Stats
    from ssetape.storage.filters import ExchangeFilter
    from ssetape.views.tables import runs_table, stats_table

    store = open_reader(db, read_db)
    try:
        standby = standby_note(store)
        rows = Stats(store).groups(by, ExchangeFilter.pop(filters), fault)
        losses = _losses(store)
    finally:
        store.close()
    if standby is not None:  # stderr: the JSON and the tables keep their shape
        click.echo(standby.describe(), err=True)
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
        console.print(stats_table(rows, by, console.width, fault=fault))
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
    from rich.console import Console
    from rich.progress import Progress
    from sqlalchemy.exc import SQLAlchemyError

    from ssetape.analysis.knowledge import Knowledge, skipped_line
    from ssetape.cost.price_book import LazyPriceBook
    from ssetape.storage.engine import describe

    store = open_db(db)
    try:
        knowledge = Knowledge(store, profiles=profiles, prices=LazyPriceBook(price_data or None))
        ids = knowledge.exchange_ids(stale_only=stale)
        with Progress(console=Console(stderr=True), disable=not sys.stderr.isatty()) as bar:
            task = bar.add_task("reindex", total=len(ids))
            done = knowledge.reanalyse(ids, progress=lambda n: bar.advance(task, n))
    except SQLAlchemyError as e:  # the store itself (gone, locked): what was done is kept
        raise click.ClickException(f"reindex stopped: {describe(e)} (--stale goes on)") from None
    finally:
        store.close()
    click.echo(f"reindexed {done} exchange(s), priced with {knowledge.prices().version}")
    if knowledge.skipped:
        # Exit 0: the rest are analysed, and these keep what they had. --stale tries them
        # again; what cannot be analysed is a bug of ours, which the line lets one report.
        click.echo(f"not analysed: {skipped_line(knowledge.skipped)}", err=True)


@click.command()
@db_option
@click.option(
    "--older-than",
    "cut",
    type=TimeParam("--older-than"),
    required=True,
    help="What started before this goes: 30d, 12h, or a date (2026-11-01).",
)
@click.option(
    "--events-only",
    is_flag=True,
    help="Delete only the events and wire chunks (the bulk): each exchange's summary (model, "
    "usage, outcome, timing, cost, findings) stays as the audit trail.",
)
@click.option("--dry-run", is_flag=True, help="Count what would go; delete nothing.")
@click.option(
    "--whole-days",
    is_flag=True,
    help="PostgreSQL in day partitions: cut at the start of the cut's UTC day, so that each "
    "day leaves whole (its partition dropped), not row by row. Use it for a prune on a "
    "schedule.",
)
@click.option(
    "--vacuum",
    is_flag=True,
    help="SQLite: then rewrite the file to give all free space back (writers wait meanwhile) "
    "and keep giving it back on later prunes.",
)
@click.option(
    "--batch-rows",
    type=click.IntRange(min=1),
    default=BATCH_ROWS,
    show_default=True,
    help="Events and chunks deleted per transaction, at most.",
)
@click.option("--json", "as_json", is_flag=True, help="Print what was removed as JSON.")
def prune(
    db: str,
    cut: dt.datetime,
    events_only: bool,
    dry_run: bool,
    whole_days: bool,
    vacuum: bool,
    batch_rows: int,
    as_json: bool,
) -> None:
    """Delete what started before a cut, in short batches, safe while recorders write.

    Exchanges still recording are never touched. A prune stopped half-way has committed the
    batches it reported and is resumed by running it again."""
    from rich.console import Console
    from rich.progress import Progress

    from ssetape.storage.prune import Pruner

    store = open_db(db)
    try:
        pruner = Pruner(store, batch_rows=batch_rows)
        with Progress(console=Console(stderr=True), disable=not sys.stderr.isatty()) as bar:
            task = bar.add_task("prune", total=None)
            report = pruner.prune(
                cut,
                events_only=events_only,
                dry_run=dry_run,
                whole_days=whole_days,
                on_batch=lambda r: bar.update(task, completed=r.exchanges),
            )
        if vacuum and not dry_run:
            report.bytes_returned = (report.bytes_returned or 0) + pruner.vacuum()
    finally:
        store.close()
    if as_json:
        print_json(report.to_json())
    else:
        click.echo(report.line())
