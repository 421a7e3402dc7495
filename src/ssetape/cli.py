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
from sqlalchemy import make_url

from ssetape.proxy_runner import ProxyRunner, ProxyStartError
from ssetape.storage.store import Store, StoreError
from ssetape.views import detail, list_table, show_view, summary

DB_HELP = "SQLite file or SQLAlchemy URL (postgresql+psycopg://...). Env: SSETAPE_DB."
DEFAULT_CONFDIR = "~/.mitmproxy"


def _out(obj: Any) -> None:
    sys.stdout.buffer.write(orjson.dumps(obj, option=orjson.OPT_INDENT_2) + b"\n")


def _open(db: str, *, create: bool = False) -> Store:
    try:
        return Store.open(db, create=create)
    except StoreError as e:
        raise click.ClickException(str(e)) from None


def validate_mode(mode: str) -> str:
    if mode == "regular":
        return mode
    kind, _, target = mode.partition(":")
    if kind == "reverse" and target.startswith(("http://", "https://")) and len(target) > 8:
        return mode
    raise click.BadParameter(
        f"{mode!r}: use 'regular' (forward proxy) or 'reverse:https://api.example.com'",
        param_hint="--mode",
    )


confdir_option = click.option(
    "--confdir",
    default=DEFAULT_CONFDIR,
    show_default=True,
    help="mitmproxy's directory (CA certificate).",
)
set_option = click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="OPTION=VALUE",
    help="Any mitmproxy option, e.g. --set ssl_insecure=true.",
)
db_option = click.option(
    "--db", envvar="SSETAPE_DB", default="ssetape.db", show_default=True, help=DB_HELP
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ssetape")
def main() -> None:
    """Record and replay streaming LLM API traffic with the timing of every event."""


def run_proxy(
    addons: list[Any],
    *,
    what: str,
    db: str,
    mode: str,
    host: str,
    port: int,
    confdir: str,
    options: dict[str, Any],
    sets: tuple[str, ...] = (),
) -> None:
    mode = validate_mode(mode)

    def ready(h: str, p: int) -> None:
        how = (
            f"set HTTP_PROXY/HTTPS_PROXY=http://{h}:{p}"
            if mode == "regular"
            else f"point your client's base_url at http://{h}:{p}"
        )
        shown = make_url(db).render_as_string(hide_password=True) if "://" in db else db
        click.echo(f"ssetape {what}: listening on http://{h}:{p} ({mode}); db {shown}; {how}")
        sys.stdout.flush()

    runner = ProxyRunner(
        addons,
        mode=mode,
        host=host,
        port=port,
        confdir=confdir,
        options=options,
        sets=sets,
        on_ready=ready,
    )
    try:
        asyncio.run(runner.run())
    except ProxyStartError as e:
        raise click.ClickException(str(e)) from None
    except OSError as e:
        raise click.ClickException(f"cannot listen on {host}:{port}: {e.strerror}") from None


@main.command()
@db_option
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on; anything but loopback exposes the proxy.",
)
@click.option(
    "--mode",
    default="regular",
    show_default=True,
    help="'regular' (forward proxy) or 'reverse:https://api.openai.com'.",
)
@click.option("--redact-header", multiple=True, help="Extra header to redact (repeatable).")
@click.option(
    "--redact-field",
    multiple=True,
    help="JSON body field to redact: dotted path or bare name (repeatable).",
)
@confdir_option
@set_option
def record(
    db: str,
    port: int,
    host: str,
    mode: str,
    redact_header: tuple[str, ...],
    redact_field: tuple[str, ...],
    confdir: str,
    sets: tuple[str, ...],
) -> None:
    """Run a recording proxy until Ctrl-C / SIGTERM."""
    from ssetape.addons.recorder import Recorder

    run_proxy(
        [Recorder()],
        what="record",
        db=db,
        mode=mode,
        host=host,
        port=port,
        confdir=confdir,
        options={
            "ssetape_db": db,
            "ssetape_redact_header": list(redact_header),
            "ssetape_redact_field": list(redact_field),
        },
        sets=sets,
    )


@main.command()
@db_option
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on; anything but loopback exposes the proxy.",
)
@click.option(
    "--mode",
    default="regular",
    show_default=True,
    help="'regular' (forward proxy) or 'reverse:https://api.openai.com'.",
)
@click.option(
    "--speed",
    default=1.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="1 = recorded timing, 2 = twice as fast, 0 = no delays.",
)
@click.option(
    "--record-mode",
    default="none",
    show_default=True,
    type=click.Choice(["none", "once", "new_episodes", "all"]),
    help="VCR.py's record modes: what to do with requests not on the tape.",
)
@click.option(
    "--ignore-field",
    multiple=True,
    help="JSON body field (dotted path) to leave out of matching (repeatable).",
)
@click.option("--match-host/--no-match-host", default=True, show_default=True)
@click.option(
    "--repeat/--no-repeat",
    default=True,
    show_default=True,
    help="Keep serving the last recording once all recordings of a request were served in order.",
)
@click.option("--redact-header", multiple=True, help="Extra header to redact (repeatable).")
@click.option(
    "--redact-field",
    multiple=True,
    help="JSON body field to redact: dotted path or bare name (repeatable).",
)
@confdir_option
@set_option
def replay(
    db: str,
    port: int,
    host: str,
    mode: str,
    speed: float,
    record_mode: str,
    ignore_field: tuple[str, ...],
    match_host: bool,
    repeat: bool,
    redact_header: tuple[str, ...],
    redact_field: tuple[str, ...],
    confdir: str,
    sets: tuple[str, ...],
) -> None:
    """Serve recorded streams back with their original timing, until Ctrl-C / SIGTERM."""
    from ssetape.addons.recorder import Recorder
    from ssetape.addons.replayer import Replayer

    run_proxy(
        [Replayer(), Recorder()],
        what="replay",
        db=db,
        mode=mode,
        host=host,
        port=port,
        confdir=confdir,
        sets=sets,
        options={
            "ssetape_db": db,
            "ssetape_speed": repr(speed),
            "ssetape_record_mode": record_mode,
            "ssetape_ignore_field": list(ignore_field),
            "ssetape_match_host": match_host,
            "ssetape_repeat": repeat,
            "ssetape_redact_header": list(redact_header),
            "ssetape_redact_field": list(redact_field),
            "connection_strategy": "lazy",
        },
    )


@main.command("list")
@db_option
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1))
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
def list_cmd(db: str, limit: int, as_json: bool) -> None:
    """List recorded exchanges, newest first."""
    store = _open(db)
    try:
        rows = store.exchanges(limit=limit)
        if as_json:
            _out([summary(x) for x in rows])
        else:
            Console().print(list_table(rows))
    finally:
        store.close()


main.add_command(list_cmd, "ls")


@main.command()
@db_option
@click.argument("exchange_id")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def show(db: str, exchange_id: str, as_json: bool) -> None:
    """Show one exchange: redacted headers, bodies, every event with its offset."""
    store = _open(db)
    try:
        key: int | str = int(exchange_id) if exchange_id.isdigit() else exchange_id
        x = store.exchange(key)
        if x is None:
            raise click.ClickException(
                f"no exchange {exchange_id} in {store.url} (see ssetape list)"
            )
        events = store.events(x.id)
        if as_json:
            _out(detail(x, events))
        else:
            Console().print(show_view(x, events))
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
def simulate(port: int, host: str, speed: float) -> None:
    """Serve a simulated OpenAI/Anthropic-style streaming API (no key, no network).

    Scenarios are chosen by keywords in the request's model name; see `ssetape simulate
    --scenarios`.
    """
    from ssetape.simulator import Simulator

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


from ssetape.demo import demo  # noqa: E402

main.add_command(demo)
