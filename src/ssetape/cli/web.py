"""`ssetape web`: the store in a browser, read-only (see ssetape.web)."""

from __future__ import annotations

import click

from ssetape.cli.options import open_reader, reader_options, shown, standby_note


@click.command()
@reader_options
@click.option("--port", default=8090, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on; anything but loopback shows the store to the network.",
)
def web(db: str, read_db: str | None, port: int, host: str) -> None:
    """Browse the store in a web page: exchanges, timelines, events, live (read-only)."""
    # Imported here: the other commands do not pay for the web framework.
    from ssetape.web.server import WebServer

    store = open_reader(db, read_db)
    try:
        try:
            server = WebServer(store, host, port)
        except OSError as e:
            raise click.ClickException(f"cannot listen on {host}:{port}: {e.strerror}") from None

        def ready(url: str) -> None:
            standby = standby_note(store)
            where = f"db {shown(read_db or db)} (read-only"
            where += f"; {standby.describe()})" if standby is not None else ")"
            click.echo(f"ssetape web: listening on {url}; {where}")

        server.run(ready)
    finally:
        store.close()
