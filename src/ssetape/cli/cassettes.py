"""`ssetape export` and `ssetape import`: cassettes (JSON Lines) and HAR files."""

from __future__ import annotations

import contextlib
import datetime as dt
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
)

from ssetape.cassettes.cassette import Cassette, CassetteError
from ssetape.cassettes.format import MAX_BYTES, MAX_LINE_BYTES
from ssetape.cassettes.har import Har
from ssetape.cassettes.store_io import Progress as ProgressFn
from ssetape.cassettes.store_io import write_cassette
from ssetape.cli.options import (
    TimeParam,
    db_option,
    filter_options,
    open_db,
    open_reader,
    reader_options,
    shown,
    size_option,
)
from ssetape.storage.cassette_rows import Narrow
from ssetape.storage.filters import ExchangeFilter, Picked
from ssetape.storage.queries import Queries
from ssetape.telemetry import OTLP_EXTRA, otlp_missing
from ssetape.vocabulary import ExchangeState


@contextlib.contextmanager
def _progress(what: str, *, in_bytes: bool = False) -> Iterator[ProgressFn | None]:
    """A progress bar on stderr when a person is watching it; silent in pipes and CI logs."""
    if not sys.stderr.isatty():
        yield None
        return
    count = DownloadColumn(binary_units=True) if in_bytes else MofNCompleteColumn()
    columns = (TextColumn(what), BarColumn(), count, TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(what, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


@click.command("export")
@reader_options
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
    help="File to write (created 0600, replaced atomically); - for standard output.",
)
@click.option(
    "--otlp",
    is_flag=True,
    help="Instead of a file, send a span per exchange over OTLP/HTTP, as `record --otlp` "
    "does, where OTEL_EXPORTER_OTLP_* say. Needs: pip install 'ssetape[otlp]'.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["jsonl", "har"]),
    help="jsonl (a cassette, lossless) or har (HAR 1.2). Default: har for *.har, else jsonl.",
)
@click.option("--id", "ids", multiple=True, help="Exchange id or uid (repeatable).")
@click.option("--host", "hosts", multiple=True, help="Only this host (repeatable).")
@click.option("--path", help="Only request paths starting with this, e.g. /v1/chat.")
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice([s.value for s in ExchangeState]),
    help="(repeatable)",
)
@click.option(
    "--until", type=TimeParam(), help="Only started before this: 30m, 1h, 2d ago or a date."
)
@filter_options
def export_cmd(
    db: str,
    read_db: str | None,
    output: Path | None,
    otlp: bool,
    fmt: str | None,
    ids: tuple[str, ...],
    hosts: tuple[str, ...],
    path: str | None,
    states: tuple[str, ...],
    until: dt.datetime | None,
    **filters: Any,
) -> None:
    """Write recorded exchanges to a cassette (JSON Lines) or a HAR file.

    Cassettes keep every byte and every event offset: `ssetape import` brings them back into
    any store and replay is identical. Each exchange line has its id in this store ("id": 12:
    `ssetape show 12`), which an import ignores. The store's redaction key is never written.
    """
    if (output is None) == (not otlp):
        raise click.UsageError("give -o/--output FILE or --otlp (one of them)")
    picked = Picked(ids=ids, hosts=hosts, path=path, states=states, until=until)
    narrow = Queries.picked(ExchangeFilter.pop(filters), picked)
    if output is None:
        return export_otlp(db, read_db, narrow)
    fmt = fmt or ("har" if output.suffix.lower() == ".har" else "jsonl")
    store = open_reader(db, read_db, create=False)
    try:
        with _progress("exporting") as progress:
            if str(output) == "-":
                out = sys.stdout.buffer
                if fmt == "har":
                    n = Har(store).write(out, narrow, progress=progress)
                else:
                    n = write_cassette(store, out, narrow, progress=progress, store_ids=True)
                out.flush()
            elif fmt == "har":
                n = Har(store).export(output, narrow, progress=progress)
            else:
                n = Cassette(output).export(store, narrow, progress=progress, store_ids=True)
    except CassetteError as e:
        raise click.ClickException(str(e)) from None
    finally:
        store.close()
    if str(output) != "-":
        click.echo(f"exported {n} exchange(s) to {output} ({fmt})", err=True)


def export_otlp(db: str, read_db: str | None, narrow: Narrow) -> None:
    """`export --otlp`: the spans `record --otlp` sends, for the exchanges picked."""
    try:
        from ssetape.telemetry.otlp import SpanSink, check_environment
        from ssetape.telemetry.span_rows import export_spans
    except ImportError as e:
        if not otlp_missing(e):
            raise
        raise click.ClickException(f"--otlp needs {OTLP_EXTRA}") from None
    try:
        check_environment()
    except ValueError as e:
        raise click.ClickException(str(e)) from None
    store = open_reader(db, read_db, create=False)
    sink = SpanSink()
    try:
        with _progress("sending spans") as progress:
            queued, skipped = export_spans(store, narrow, sink, progress)
    finally:
        store.close()
        t = sink.close(timeout=60)
    note = f" ({skipped} still recording, left out)" if skipped else ""
    click.echo(f"sent {t.sent} span(s) to {sink.endpoint}{note}", err=True)
    if t.lost:
        raise click.ClickException(f"{t.failed + t.pending} of {queued} span(s) not sent")


@click.command("import")
@click.argument("cassette", type=click.Path(dir_okay=False, path_type=Path))
@db_option
@size_option("--max-line-bytes", MAX_LINE_BYTES, "64MiB", "Refuse longer lines (e.g. 64MiB).")
@size_option("--max-bytes", MAX_BYTES, "4GiB", "Refuse larger cassettes.")
def import_cmd(cassette: Path, db: str, max_line_bytes: int, max_bytes: int) -> None:
    """Add a cassette's exchanges to a store (one transaction; exchanges already there are
    skipped), ready for `ssetape replay`."""
    tape = Cassette(cassette, max_line_bytes=max_line_bytes, max_bytes=max_bytes)
    try:
        # Refuse a file that is not a cassette before a store gets created for it.
        with contextlib.closing(tape.records()) as records:
            next(records, None)
    except CassetteError as e:
        raise click.ClickException(str(e)) from None
    store = open_db(db, create=True)
    try:
        with _progress("importing", in_bytes=True) as progress:
            report = tape.import_into(store, progress=progress)
    except CassetteError as e:
        raise click.ClickException(f"{e} (nothing imported)") from None
    finally:
        store.close()
    if report.ignored:
        keys = ", ".join(f"{k} (line {n})" for k, n in sorted(report.ignored.items()))
        click.echo(
            f"warning: ignored unknown field(s) {keys}: written by a newer ssetape?", err=True
        )
    msg = (
        f"imported {report.exchanges} exchange(s) ({report.events} events, {report.chunks} "
        f"chunks) into {shown(db)}"
    )
    if report.skipped:
        msg += f"; {report.skipped} already there (same uid), skipped"
    click.echo(msg)
