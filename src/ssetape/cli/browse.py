"""`ssetape list` and `ssetape show`: what was recorded, exchange by exchange."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ssetape.cli.options import (
    filter_options,
    open_reader,
    print_json,
    reader_options,
    standby_note,
)
from ssetape.views.documents import EVENTS_SHOWN
from ssetape.vocabulary import ExchangeState, Transport

# The store, its views and rich are imported in the commands, and the timeline only by
# `show --timeline/--svg`: `ssetape list --help` needs none of them (SQLAlchemy alone is a
# quarter of a second).
if TYPE_CHECKING:
    from ssetape.storage.models import Exchange, Finding
    from ssetape.storage.queries import Queries
    from ssetape.storage.sorted_pages import Sort
    from ssetape.storage.standby import StandbyState

AS_OF_STANDBY = "(as of the standby)"


def _sort(_ctx: click.Context, _param: click.Parameter, value: str | None) -> Sort:
    # Here: the sorts are the store's (SQLAlchemy), which `ssetape list --help` does without.
    from ssetape.storage.sorted_pages import Sort

    try:
        return Sort.parse(value, option="")
    except ValueError as e:
        raise click.BadParameter(str(e).strip()) from None


@click.command("list")
@reader_options
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1))
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@click.option(
    "--sort",
    metavar="KEY",
    callback=_sort,
    help="Order by started (the default: -started, newest first), duration, ttfb, ttft or gap "
    "(the longest pause); - before it: descending (-duration: slowest first). Exchanges "
    "without the value come last.",
)
@click.option(
    "--cursor",
    metavar="CURSOR",
    help="Start after the last exchange of the previous page: the cursor it printed.",
)
@filter_options
@click.option("--host", help="Only this host.")
def list_cmd(
    db: str, read_db: str | None, limit: int, as_json: bool, sort: Sort, cursor: str | None,
    **filters: Any,
) -> None:  # fmt: skip
    """List recorded exchanges, newest first unless --sort says otherwise (alias: ls)."""
    from ssetape.storage.filters import ExchangeFilter
    from ssetape.storage.queries import Queries
    from ssetape.storage.text_matches import TextMatch, TextMatches
    from ssetape.views.documents import summary

    if cursor is not None:
        try:  # checked before the store is opened: a wrong cursor reads nothing
            sort.after(cursor)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="'--cursor'") from None
    store = open_reader(db, read_db)
    try:
        # Asked before the rows are read: the lag printed is then at most what they show.
        standby = standby_note(store)
        found = ExchangeFilter.pop(filters)
        rows = Queries(store).exchanges(found, limit=limit, sort=sort, cursor=cursor)
        # A full page may have a next: where it starts (the JSON array stays an array).
        more = f"next page: --cursor {sort.cursor(rows[-1])}" if len(rows) == limit else None
        # --grep: where each row has the text, and the text around it (cut by the store).
        grep = found.text
        matches = TextMatches(store).around([x.id for x in rows], grep) if grep else {}
        if as_json:
            # An array, as ever: the note goes to stderr.
            print_json([summary(x) | TextMatch.doc_of(matches, x.id, grep) for x in rows])
            if standby is not None:
                click.echo(_standby_line(standby, rows), err=True)
            if more is not None:
                click.echo(more, err=True)
            return
        # rich for the table only: `list --json` in a script does without it.
        from rich.console import Console
        from rich.text import Text

        from ssetape.views.matches import match_lines
        from ssetape.views.tables import list_table

        console = Console()
        console.print(list_table(rows, console.width))
        for line in match_lines([x.id for x in rows], matches):
            console.print(line, soft_wrap=True)
        if standby is not None:
            # One line however narrow the terminal: it is there to be read (and grepped).
            console.print(Text(_standby_line(standby, rows), style="dim"), soft_wrap=True)
        if more is not None:
            console.print(Text(more, style="dim"), soft_wrap=True)
    finally:
        store.close()


def _standby_line(standby: StandbyState, rows: list[Exchange]) -> str:
    """The standby's lag, and which exchanges it shows still recording: they may have
    finished on the primary since (their end not replayed yet)."""
    line = standby.describe()
    recording = [f"#{x.id}" for x in rows if x.state == ExchangeState.RECORDING]
    if recording:
        line += f"; {', '.join(recording)} recording {AS_OF_STANDBY}"
    return line


def _event_range(
    _ctx: click.Context, _param: click.Parameter, value: str | None
) -> tuple[int, int | None] | None:
    """``A:B`` (seq A up to, not including, B; either may be left out) as (A, B)."""
    if value is None:
        return None
    first, colon, last = value.partition(":")
    try:
        start = int(first) if first.strip() else 0
        stop = int(last) if last.strip() else None
    except ValueError:
        start = -1
    if not colon or start < 0 or (stop is not None and stop < start):
        raise click.BadParameter(f"{value!r}: use A:B, A: or :B with seq numbers, A <= B")
    return start, stop


@click.command()
@reader_options
@click.argument("exchange_id")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--timeline", is_flag=True, help="Draw when each event came, instead of the events.")
@click.option(
    "--svg",
    "svg_file",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="Save the timeline as an SVG image (for a bug report).",
)
@click.option(
    "--full",
    is_flag=True,
    help="Print large events, bodies, every header and every event whole (not cut).",
)
@click.option(
    "--events",
    "event_range",
    metavar="A:B",
    callback=_event_range,
    help=f"The events with seq A up to B (default: the first {EVENTS_SHOWN:,}; --full: all).",
)
def show(
    db: str,
    read_db: str | None,
    exchange_id: str,
    as_json: bool,
    timeline: bool,
    svg_file: Path | None,
    full: bool,
    event_range: tuple[int, int | None] | None,
) -> None:
    """Show one exchange: redacted headers, bodies, its events with their offsets."""
    from ssetape.storage.queries import Queries
    from ssetape.views.documents import write_detail

    store = open_reader(db, read_db)
    try:
        standby = standby_note(store)
        queries = Queries(store)
        key: int | str = int(exchange_id) if exchange_id.isdigit() else exchange_id
        x = queries.exchange(key)
        if x is None:
            where = f"{store.url}: {standby.describe()}" if standby else store.url
            raise click.ClickException(f"no exchange {exchange_id} in {where} (see ssetape list)")
        if standby is not None:
            # First, and on stderr: --json, --timeline and --svg keep their output as it is.
            click.echo(_standby_line(standby, [x]), err=True)
        findings = queries.findings(x.id)
        if timeline or svg_file:
            _draw_timeline(x, queries, timeline, svg_file)
            return
        start, stop = event_range or (0, None if full else EVENTS_SHOWN)
        if as_json:
            write_detail(sys.stdout.buffer, x, queries, findings, full=full, start=start, stop=stop)
            return
        _print_show(x, queries, findings, full, start, stop)
    finally:
        store.close()


def _draw_timeline(x: Exchange, queries: Queries, timeline: bool, svg_file: Path | None) -> None:
    """`show --timeline` in the terminal, `--svg` in a file."""
    from rich.console import Console

    from ssetape.views.ws_timeline import is_session

    if is_session(x):
        _draw_session(x, queries, timeline, svg_file)
        return

    from ssetape.views.timeline import Timeline
    from ssetape.views.timeline_chart import TimelineChart

    chart = Timeline.of(x, queries)
    if svg_file:
        # Only here: the SVG's escaping imports xml.sax, which imports urllib and http.
        from ssetape.files import write_private
        from ssetape.views.timeline_svg import TimelineSvg

        write_private(svg_file, TimelineSvg(chart).render().encode())
        click.echo(f"timeline of #{x.id} ({len(chart.marks)} events) written to {svg_file}")
    if timeline:
        Console().print(TimelineChart(chart).render(width=Console().width))


def _draw_session(x: Exchange, queries: Queries, timeline: bool, svg_file: Path | None) -> None:
    """A WebSocket session: client frames above, server frames below, its turns under them."""
    from rich.console import Console

    from ssetape.views.ws_timeline import TURNS_SHOWN, SessionTimeline
    from ssetape.views.ws_timeline_chart import SessionChart, chart_cells, turns_table

    if svg_file:
        from ssetape.files import write_private
        from ssetape.web.ws_timeline import SVG_WIDTH, session_svg, svg_cells

        drawn = SessionTimeline.read(x, queries, cells=svg_cells(SVG_WIDTH), keep=TURNS_SHOWN)
        write_private(svg_file, session_svg(drawn, standalone=True).encode())
        n = drawn.lane_total("client") + drawn.lane_total("server")
        click.echo(f"timeline of #{x.id} ({n} frames, {drawn.session.total} turns) written to "
                   f"{svg_file}")  # fmt: skip
    if timeline:
        console = Console()
        cells = chart_cells(console.width, x.event_count)
        chart = SessionTimeline.read(x, queries, cells=cells, keep=TURNS_SHOWN)
        console.print(SessionChart(chart).render(width=console.width))
        for part in turns_table(chart.session.turns, chart.session.total):
            console.print(part)


def _print_show(
    x: Exchange,
    queries: Queries,
    findings: list[Finding],
    full: bool,
    start: int,
    stop: int | None,
) -> None:
    """Printed as it is read: the first screen comes before the rest of the stream is read."""
    from rich.console import Console
    from rich.text import Text

    from ssetape.views.tables import events_tables, show_parts

    console = Console()
    for part in show_parts(x, findings, full=full):
        console.print(part)
    if not x.is_stream:
        return
    if x.transport == Transport.WEBSOCKET:  # its two lanes and its turns before its frames
        _draw_session(x, queries, True, None)
    span = queries.event_span(x.id)
    total, shown = span.count, 0
    events = queries.events(x.id, start=start, stop=stop)
    last_us = span.last_offset_us or 0
    # Tables of a hundred rows: the first is on the screen before the next is laid out.
    for table in events_tables(events, total=total, last_us=last_us, full=full, page=100):
        console.print(table)
        shown += table.row_count
    before = queries.event_span(x.id, stop=start).count if start else 0
    after = total - before - shown
    if after > 0:
        stop = start + shown if stop is None else stop
        console.print(
            Text(
                f"… {after:,} more events: --events {stop}:{stop + EVENTS_SHOWN} shows the next, "
                "--full shows all",
                style="dim",
            )
        )
