"""The `ssetape` command line."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import click
import orjson
from rich.console import Console

from ssetape.analysis.knowledge import Indexer
from ssetape.cli.proxy import DEFAULT_CONFDIR, db_option, open_db, record, replay
from ssetape.files import write_private
from ssetape.storage.filters import Filters
from ssetape.views.tables import detail, list_table, show_view, summary, timeline_of


def _out(obj: Any) -> None:
    sys.stdout.buffer.write(orjson.dumps(obj, option=orjson.OPT_INDENT_2) + b"\n")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ssetape")
def main() -> None:
    """Record and replay streaming LLM API traffic with the timing of every event."""


@main.command("list")
@db_option
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1))
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@Filters.options
def list_cmd(db: str, limit: int, as_json: bool, **filters: Any) -> None:
    """List recorded exchanges, newest first."""
    store = open_db(db)
    try:
        rows = store.exchanges(limit=limit, where=Filters.pop(filters).apply)
        if as_json:
            _out([summary(x) for x in rows])
        else:
            console = Console()
            console.print(list_table(rows, console.width))
    finally:
        store.close()


main.add_command(list_cmd, "ls")


@main.command()
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
def show(db: str, exchange_id: str, as_json: bool, timeline: bool, svg_file: Path | None) -> None:
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
        findings = Indexer(store).findings(x.id)
        if timeline or svg_file:
            chart = timeline_of(x, events)
            if svg_file:
                write_private(svg_file, chart.svg().encode())
                click.echo(f"timeline of #{x.id} ({len(events)} events) written to {svg_file}")
            if timeline:
                Console().print(chart.render(width=Console().width))
            return
        if as_json:
            _out(detail(x, events, findings))
        else:
            Console().print(show_view(x, events, findings))
    finally:
        store.close()


@main.command()
@click.option("--port", default=9000, show_default=True, type=click.IntRange(0, 65535))
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option(
    "--speed",
    default=1.0,
    show_default=True,
    type=click.FloatRange(min=0.01),
    help="Divide every delay by this.",
)
@click.option("--scenarios", is_flag=True, help="Describe the endpoints and scenarios, then exit.")
def simulate(port: int, host: str, speed: float, scenarios: bool) -> None:
    """Serve a simulated OpenAI/Anthropic-style streaming API (no key, no network).

    Scenarios are chosen by keywords in the request's model name (sim-error, sim-cut,
    sim-pause, ...); `ssetape simulate --scenarios` describes them all.
    """
    if scenarios:
        import ssetape.simulator.scenario

        click.echo((ssetape.simulator.scenario.__doc__ or "").strip())
        return
    from ssetape.simulator.simulator import Simulator

    async def serve() -> None:
        sim = Simulator(host=host, port=port, speed=speed, verbose=True)
        await sim.start()
        click.echo(
            f"ssetape simulate: listening on {sim.url} "
            f"(OpenAI base_url={sim.url}/v1, Anthropic base_url={sim.url})"
        )
        sys.stdout.flush()
        await sim.serve_forever()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass
    except OSError as e:
        raise click.ClickException(f"cannot listen on {host}:{port}: {e.strerror}") from None


@main.command()
@click.option("--confdir", default=DEFAULT_CONFDIR, show_default=True)
@click.option(
    "--bundle",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write a CA bundle (system roots + ssetape's CA) for SSL_CERT_FILE.",
)
def ca(confdir: str, bundle: Path | None) -> None:
    """Print where the proxy's CA certificate is and how to trust it (created if missing)."""
    from mitmproxy.certs import CertStore

    d = Path(os.path.expanduser(confdir))
    CertStore.from_store(d, "mitmproxy", 2048)
    pem = d / "mitmproxy-ca-cert.pem"
    click.echo(f"CA certificate: {pem}")
    click.echo("Trust it for HTTPS recording, e.g. Python/httpx: SSL_CERT_FILE=<bundle>,")
    click.echo("requests: REQUESTS_CA_BUNDLE=<bundle>, Node: NODE_EXTRA_CA_CERTS=" + str(pem))
    if bundle is not None:
        import certifi

        bundle.write_bytes(Path(certifi.where()).read_bytes() + b"\n" + pem.read_bytes())
        click.echo(f"bundle (system roots + CA) written to {bundle}")


from ssetape.cli.audit import reindex, stats  # noqa: E402
from ssetape.cli.cassettes import export_cmd, import_cmd  # noqa: E402
from ssetape.cli.demo import demo  # noqa: E402

main.add_command(stats)
main.add_command(reindex)
main.add_command(record)
main.add_command(replay)
main.add_command(demo)
main.add_command(export_cmd)
main.add_command(import_cmd)
