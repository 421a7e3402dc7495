"""`ssetape mcp`: the store as a Model Context Protocol server over stdio (see
ssetape.mcp_server)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from ssetape.cli.options import open_reader, reader_options

if TYPE_CHECKING:
    from ssetape.storage.store import Store


@click.command("mcp")
@reader_options
@click.option(
    "-v", "--verbose", is_flag=True,
    help="Log each request on stderr (by default only warnings and errors).",
)  # fmt: skip
def mcp_cmd(db: str, read_db: str | None, verbose: bool) -> None:
    """Serve the store to coding agents over MCP on stdio (read-only tools)."""
    # Imported here: the other commands do not pay for the SDK. Stdout is the protocol's:
    # nothing else may print there.
    from ssetape.mcp_server.server import serve

    store = _open(db, read_db)
    try:
        serve(store, "INFO" if verbose else "WARNING")
    finally:
        store.close()


def _open(db: str, read_db: str | None) -> Store:
    """The store the tools read, opened read-only: they are declared so (``readOnlyHint``),
    so they write nothing, not even what `ssetape list` does on opening the primary (mark a
    dead recorder's exchanges ``interrupted``): that is left to recorders and the commands
    that write. The primary's schema is still brought to this ssetape's first, as every
    command that opens it does, so an upgrade needs no step before an agent can read; then
    every query runs in a read-only transaction (PostgreSQL). A standby (``--read-db``) and a
    cassette (read from a private copy) are opened as `list` opens them."""
    if read_db or (db.endswith(".jsonl") and "://" not in db):
        return open_reader(db, read_db)
    from ssetape.storage.store import Store, StoreError

    try:
        Store.open(db, create=False).close()
        return Store.open_read_only(db)
    except StoreError as e:
        raise click.ClickException(str(e)) from None
