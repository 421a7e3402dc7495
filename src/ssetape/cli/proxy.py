"""`ssetape record` and `ssetape replay`: the commands that run a proxy."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click
from sqlalchemy import make_url

from ssetape.storage.store import Store, StoreError

DB_HELP = "SQLite file or SQLAlchemy URL (postgresql+psycopg://...). Env: SSETAPE_DB."
DEFAULT_CONFDIR = "~/.mitmproxy"
F = TypeVar("F", bound=Callable[..., Any])

db_option = click.option(
    "--db", envvar="SSETAPE_DB", default="ssetape.db", show_default=True, help=DB_HELP
)


def open_db(db: str, *, create: bool = False) -> Store:
    """Open a store for a command: a one-line error if that fails. Exchanges left
    ``recording`` by a recorder that is gone (crash, kill -9) show as ``interrupted``."""
    try:
        store = Store.open(db, create=create)
    except StoreError as e:
        raise click.ClickException(str(e)) from None
    from ssetape.storage.runs import Runs

    with contextlib.suppress(Exception):  # a read-only user still gets to read
        Runs(store).mark_gone_interrupted()
    return store


def proxy_options(f: F) -> F:
    """The options every proxy command takes."""
    for option in reversed([
        db_option,
        click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535)),
        click.option("--host", default="127.0.0.1", show_default=True,
                     help="Address to listen on; anything but loopback exposes the proxy."),
        click.option("--mode", default="regular", show_default=True,
                     help="'regular' (forward proxy) or 'reverse:https://api.openai.com'."),
        click.option("--redact-header", multiple=True,
                     help="Extra header to redact (repeatable)."),
        click.option("--redact-field", multiple=True,
                     help="JSON body field to redact: dotted path or bare name (repeatable)."),
        click.option("--confdir", default=DEFAULT_CONFDIR, show_default=True,
                     help="mitmproxy's directory (CA certificate)."),
        click.option("--set", "sets", multiple=True, metavar="OPTION=VALUE",
                     help="Any mitmproxy option, e.g. --set ssl_insecure=true."),
    ]):  # fmt: skip
        f = option(f)
    return f


def shown(db: str) -> str:
    """The database as it may be printed: no password."""
    return make_url(db).render_as_string(hide_password=True) if "://" in db else db


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


def run_proxy(
    addons: list[Any],
    *,
    what: str,
    db: str,
    mode: str,
    host: str,
    port: int,
    confdir: str,
    sets: tuple[str, ...],
    redact_header: tuple[str, ...],
    redact_field: tuple[str, ...],
    extra: dict[str, Any],
) -> None:
    """Run mitmproxy with ``addons`` and the options of ``proxy_options`` plus ``extra``."""
    options = {
        "ssetape_db": db,
        "ssetape_redact_header": list(redact_header),
        "ssetape_redact_field": list(redact_field),
        **extra,
    }
    mode = validate_mode(mode)

    def ready(h: str, p: int) -> None:
        how = (
            f"set HTTP_PROXY/HTTPS_PROXY=http://{h}:{p}"
            if mode == "regular"
            else f"point your client's base_url at http://{h}:{p}"
        )
        click.echo(f"ssetape {what}: listening on http://{h}:{p} ({mode}); db {shown(db)}; {how}")
        sys.stdout.flush()

    # Here, not at the top: mitmproxy takes most of a second to import, and the
    # commands that only read the store (list, show, stats) should not pay for it.
    from ssetape.replay.proxy_runner import ProxyRunner, ProxyStartError

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


@click.command()
@proxy_options
def record(**common: Any) -> None:
    """Run a recording proxy until Ctrl-C / SIGTERM."""
    from ssetape.addons.recorder import Recorder

    recorder = Recorder()
    run_proxy([recorder], what="record", extra={}, **common)
    # A warning (something lost) was already logged; the clean count is for the user too.
    if recorder.exit_line and not recorder.exit_warned:
        click.echo(recorder.exit_line)


@click.command()
@proxy_options
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
def replay(
    speed: float,
    record_mode: str,
    ignore_field: tuple[str, ...],
    match_host: bool,
    repeat: bool,
    **common: Any,
) -> None:
    """Serve recorded streams back with their original timing, until Ctrl-C / SIGTERM."""
    from ssetape.addons.recorder import Recorder
    from ssetape.addons.replayer import Replayer

    db, mode = common["db"], common["mode"]
    if mode.startswith("reverse:") and not common["sets"] and _nothing_to_forward(db, record_mode):
        _replay_direct(
            db, validate_mode(mode), common["host"], common["port"], speed, ignore_field,
            match_host, repeat, common["redact_header"], common["redact_field"],
        )  # fmt: skip
        return
    run_proxy(
        [Replayer(), Recorder()],
        what="replay",
        extra={
            "ssetape_speed": repr(speed),
            "ssetape_record_mode": record_mode,
            "ssetape_ignore_field": list(ignore_field),
            "ssetape_match_host": match_host,
            "ssetape_repeat": repeat,
            "connection_strategy": "lazy",
        },
        **common,
    )


def _nothing_to_forward(db: str, record_mode: str) -> bool:
    """True when no request can go upstream: replay may bypass mitmproxy entirely."""
    if record_mode == "none":
        return True
    if record_mode != "once":
        return False
    try:
        store = Store.open(db, create=False)
    except StoreError:
        return False  # no tape yet: `once` records
    try:
        return bool(store.exchanges(limit=1))
    finally:
        store.close()


def _replay_direct(
    db: str,
    mode: str,
    host: str,
    port: int,
    speed: float,
    ignore: tuple[str, ...],
    match_host: bool,
    repeat: bool,
    redact_header: tuple[str, ...],
    redact_field: tuple[str, ...],
) -> None:
    from mitmproxy.exceptions import OptionsError

    from ssetape.replay.direct_front import run_front

    def ready(h: str, p: int) -> None:
        click.echo(
            f"ssetape replay: listening on http://{h}:{p} ({mode}); db {shown(db)}; "
            f"point your client's base_url at http://{h}:{p}"
        )
        sys.stdout.flush()

    try:
        run_front(
            db,
            mode.partition(":")[2],
            host=host,
            port=port,
            speed=speed,
            ignore=list(ignore),
            match_host=match_host,
            repeat=repeat,
            redact_headers=list(redact_header),
            redact_fields=list(redact_field),
            on_ready=ready,
        )
    except (StoreError, OptionsError) as e:
        raise click.ClickException(str(e)) from None
    except OSError as e:
        raise click.ClickException(f"cannot listen on {host}:{port}: {e.strerror}") from None
