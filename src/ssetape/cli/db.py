"""`ssetape db status`: where a store's schema stands, changing nothing."""

from __future__ import annotations

import click
import orjson

from ssetape.cli.options import db_option

__all__ = ["db"]

# Exit codes a script can act on before it switches binaries.
EXIT = {"current": 0, "behind": 1, "empty": 1, "newer": 3}


@click.group()
def db() -> None:
    """The store's schema: `db status` says which revision it is at and which this ssetape
    wants, changing nothing."""


@db.command()
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def status(db: str, as_json: bool) -> None:
    """Say which schema revision the store is at and which this ssetape wants, changing
    nothing (every other command migrates a store when it opens it). Exit 0: current; 1:
    this ssetape would migrate it (or nothing made it yet); 3: a newer ssetape made it."""
    from ssetape.storage.schema_status import SchemaStatus
    from ssetape.storage.store import StoreError

    try:
        s = SchemaStatus.read(db)
    except StoreError as e:
        raise click.ClickException(str(e)) from None
    if as_json:
        doc = {"state": s.state, "current": list(s.current), "head": s.head,
               "pending": [{"revision": r, "does": d} for r, d in s.pending]}  # fmt: skip
        click.echo(orjson.dumps(doc).decode())
    else:
        at = ", ".join(s.current) or "none"
        click.echo(f"store at revision {at}; this ssetape's is {s.head}: {s.state}")
        if s.state == "newer":
            click.echo("a newer ssetape made this store: upgrade ssetape before using it")
        for rev, does in s.pending:
            click.echo(f"  to apply when it next opens: {rev} {does}")
    raise SystemExit(EXIT[s.state])
