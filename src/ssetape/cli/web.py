"""`ssetape web`: the store in a browser, read-only (see ssetape.web)."""

from __future__ import annotations

from pathlib import Path

import click

from ssetape.cli.options import open_untouched, reader_options, shown, standby_note


@click.command()
@reader_options
@click.option("--port", default=8090, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on; anything but loopback shows the store to the network.",
)
@click.option(
    "--max-live",
    default=100,
    show_default=True,
    type=click.IntRange(1, 100_000),
    help="Live streams served at once (pages following a recording); past it: 503, "
    "the page still loads.",
)
def web(db: str, read_db: str | None, port: int, host: str, max_live: int) -> None:
    """Browse the store in a web page: exchanges, timelines, events, live (read-only).

    An SQLite store that does not exist yet is waited for: the list is empty until a
    recorder creates it, then fills as it records."""
    # Imported here: the other commands do not pay for the web framework.
    from ssetape.storage.store import Store
    from ssetape.web.server import WebServer
    from ssetape.web.waiting_store import WaitingStore

    missing = None if read_db else _missing_sqlite_file(db)
    store: Store | WaitingStore = (
        WaitingStore(missing) if missing is not None else open_untouched(db, read_db)
    )
    try:
        try:
            server = WebServer(store, host, port, max_live=max_live)
        except OSError as e:
            raise click.ClickException(f"cannot listen on {host}:{port}: {e.strerror}") from None

        def ready(url: str) -> None:
            where = f"db {shown(read_db or db)} (read-only"
            if isinstance(store, WaitingStore):
                where += "; nothing recorded yet: the list fills once a recorder creates it)"
            elif (standby := standby_note(store)) is not None:
                where += f"; {standby.describe()})"
            else:
                where += ")"
            click.echo(f"ssetape web: listening on {url}; {where}")

        server.run(ready)
    finally:
        store.close()


def _missing_sqlite_file(db: str) -> Path | None:
    """The SQLite file ``db`` names when it does not exist yet (a store not recorded yet)."""
    from ssetape.storage.engine import resolve_target
    from ssetape.storage.store import StoreError

    try:
        _, path = resolve_target(db)
    except StoreError:
        return None  # open_reader says what is wrong with it
    if path is None or path.exists() or not path.absolute().parent.is_dir():
        return None  # a folder that is not there either: the usual error, "check --db"
    return path
