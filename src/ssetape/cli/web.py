"""`ssetape web`: the store in a browser, read-only (see ssetape.web)."""

from __future__ import annotations

import click

from ssetape.cli.options import db_option, open_db, shown


@click.command()
@db_option
@click.option("--port", default=8090, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on; anything but loopback shows the store to the network.",
)
def web(db: str, port: int, host: str) -> None:
    """Browse the store in a web page: exchanges, timelines, events, live (read-only)."""
    # Imported here: the other commands do not pay for the web framework.
    from ssetape.web.server import WebServer

    store = open_db(db)
    try:
        try:
            server = WebServer(store, host, port)
        except OSError as e:
            raise click.ClickException(f"cannot listen on {host}:{port}: {e.strerror}") from None

        def ready(url: str) -> None:
            click.echo(f"ssetape web: listening on {url}; db {shown(db)} (read-only)")

        server.run(ready)
    finally:
        store.close()
