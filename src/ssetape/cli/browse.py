"""`ssetape list` and `ssetape show`: what was recorded, exchange by exchange."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.console import Console

from ssetape.analysis.knowledge import Knowledge
from ssetape.cli.options import db_option, filter_options, open_db, print_json
from ssetape.files import write_private
from ssetape.storage.filters import Filters
from ssetape.views.documents import detail, summary
from ssetape.views.tables import list_table, show_view
from ssetape.views.timeline import Timeline
from ssetape.views.timeline_chart import TimelineChart
from ssetape.views.timeline_svg import TimelineSvg


@click.command("list")
@db_option
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1))
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@filter_options
def list_cmd(db: str, limit: int, as_json: bool, **filters: Any) -> None:
    """List recorded exchanges, newest first (alias: ls)."""
    store = open_db(db)
    try:
        rows = store.exchanges(limit=limit, where=Filters.pop(filters).apply)
        if as_json:
            print_json([summary(x) for x in rows])
        else:
            console = Console()
            console.print(list_table(rows, console.width))
    finally:
        store.close()


@click.command()
@db_option
@click.argument("exchange_id")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--timeline", is_flag=True, help="Draw when each event came, instead of the events.")
@click.option(
    "--svg",
    "svg_file",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="Save the timeline as an SVG image (for a bug report).",
)
@click.option("--full", is_flag=True, help="Print large events and bodies whole (not cut).")
def show(
    db: str, exchange_id: str, as_json: bool, timeline: bool, svg_file: Path | None, full: bool
) -> None:
    """Show one exchange: redacted headers, bodies, every event with its offset."""
    store = open_db(db)
    try:
        key: int | str = int(exchange_id) if exchange_id.isdigit() else exchange_id
        x = store.exchange(key)
        if x is None:
            raise click.ClickException(
                f"no exchange {exchange_id} in {store.url} (see ssetape list)"
            )
        events = store.events(x.id)
        findings = Knowledge(store).findings(x.id)
        if timeline or svg_file:
            chart = Timeline.of(x, events)
            if svg_file:
                write_private(svg_file, TimelineSvg(chart).render().encode())
                click.echo(f"timeline of #{x.id} ({len(events)} events) written to {svg_file}")
            if timeline:
                Console().print(TimelineChart(chart).render(width=Console().width))
            return
        if as_json:
            print_json(detail(x, events, findings, full=full))
        else:
            Console().print(show_view(x, events, findings, full=full))
    finally:
        store.close()
