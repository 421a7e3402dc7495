"""`ssetape mcp`: the store as a Model Context Protocol server over stdio (see
ssetape.mcp_server)."""

from __future__ import annotations

import click

from ssetape.cli.options import open_untouched, reader_options


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

    store = open_untouched(db, read_db)
    try:
        serve(store, "INFO" if verbose else "WARNING")
    finally:
        store.close()
