"""`ssetape record`, `replay` and `ca`: the commands that run a proxy, and its CA."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import certifi
import click
from mitmproxy.certs import CertStore

from ssetape.addons.admin import Admin
from ssetape.addons.control import Control
from ssetape.addons.guard import ConnectionGuard
from ssetape.addons.handshakes import HandshakeSlots
from ssetape.addons.recorder import Recorder
from ssetape.addons.replayer import Replayer
from ssetape.addons.tls_failures import TlsFailures
from ssetape.cli.options import (
    DEFAULT_CONFDIR,
    proxy_options,
    shown,
    validate_mode,
    web_option,
)
from ssetape.replay.direct_front import run_front
from ssetape.replay.faults import EXAMPLES, FaultError, Faults
from ssetape.replay.proxy_runner import ProxyRunner, ProxyStartError
from ssetape.replay.timed_server import FAULTS_ENV
from ssetape.storage.store import Store, StoreError
from ssetape.vocabulary import RecordMode

if TYPE_CHECKING:
    from ssetape.web.server import Beside

# The viewer beside a proxy listens on loopback only (`ssetape web --host` can say otherwise).
WEB_HOST = "127.0.0.1"


def proxy_runner(
    addons: list[Any],
    *,
    db: str,
    mode: str,
    host: str,
    port: int,
    confdir: str,
    sets: tuple[str, ...],
    redact_header: tuple[str, ...],
    redact_field: tuple[str, ...],
    profiles: dict[str, str],
    session: str,
    price_data: str,
    extra: dict[str, Any],
    on_ready: Callable[[str, int], None],
) -> ProxyRunner:
    """mitmproxy with ``addons`` and the options of ``proxy_options`` plus ``extra``."""
    options = {
        "ssetape_db": db,
        "ssetape_redact_header": list(redact_header),
        "ssetape_redact_field": list(redact_field),
        "ssetape_profile": [f"{host}={name}" for host, name in profiles.items()],
        "ssetape_session": session,
        "ssetape_price_data": price_data,
        **extra,
    }
    return ProxyRunner(
        addons,
        mode=validate_mode(mode),
        host=host,
        port=port,
        confdir=confdir,
        options=options,
        sets=sets,
        on_ready=on_ready,
    )


def recording_runner(
    on_ready: Callable[[str, int], None], **common: Any
) -> tuple[ProxyRunner, Recorder]:
    """The proxy of `ssetape record` (and of `ssetape run`) and its recorder."""
    recorder = Recorder()
    # The upstream is dialled once a request head is complete, not when a client connects:
    # a reverse proxy that dials at once drops the client without a word when the upstream
    # is down (dialled per request, the client gets a 502 naming it and the exchange is
    # recorded as failed with the cause), and a client that never sends a head would hold
    # two descriptors instead of one.
    lazy = {"connection_strategy": "lazy"}
    # Control answers the pytest plugin, which shares one recording proxy between tests.
    # Admin after the recorder: /readyz says "stopping" while the recorder stores the rest.
    admin = Admin(recorder)
    addons = [ConnectionGuard(), TlsFailures(), Control(recorder), recorder, admin]

    def ready(host: str, port: int) -> None:
        on_ready(host, port)
        if admin.url is not None:  # the port chosen, for --admin HOST:0
            click.echo(f"ssetape admin: listening on {admin.url} (/healthz, /readyz)")
            sys.stdout.flush()

    runner = proxy_runner(addons, extra=lazy, on_ready=ready, **common)
    return runner, recorder


def serve(runner: ProxyRunner) -> None:
    """Run ``runner`` until it is stopped; a one-line error if it cannot start."""
    try:
        asyncio.run(runner.run())
    except ProxyStartError as e:
        raise click.ClickException(str(e)) from None
    except OSError as e:
        where = f"{runner.host}:{runner.port}"
        raise click.ClickException(f"cannot listen on {where}: {e.strerror}") from None


def announce(what: str, db: str, mode: str) -> Callable[[str, int], None]:
    """The line a proxy command prints once it listens (tests and scripts wait for it)."""

    def ready(h: str, p: int) -> None:
        how = (
            f"set HTTP_PROXY/HTTPS_PROXY=http://{h}:{p}"
            if mode == "regular"
            else f"point your client's base_url at http://{h}:{p}"
        )
        click.echo(f"ssetape {what}: listening on http://{h}:{p} ({mode}); db {shown(db)}; {how}")
        sys.stdout.flush()

    return ready


def viewer(web: int | None, db: str, *, err: bool = False) -> Beside | None:
    """The viewer ``--web PORT`` asks for, its port bound (a one-line error if it cannot be),
    not yet serving: :func:`with_viewer` starts it once the proxy listens."""
    if web is None:
        return None
    # Imported here: a proxy without --web does not pay for the web framework.
    from ssetape.web.server import Beside

    def ready(url: str) -> None:
        # Not the proxy's line: `ssetape web: ` before it (scripts wait for the first
        # "listening on", the proxy's, printed before this one).
        click.echo(f"ssetape web: listening on {url}; db {shown(db)} (read-only)", err=err)
        (sys.stderr if err else sys.stdout).flush()

    try:
        return Beside(db, WEB_HOST, web, ready)
    except OSError as e:
        raise click.ClickException(f"cannot listen on {WEB_HOST}:{web}: {e.strerror}") from None


def with_viewer(
    ready: Callable[[str, int], None], beside: Beside | None
) -> Callable[[str, int], None]:
    """``ready``, then the viewer started (on its own thread: nothing waits on the proxy's
    loop)."""
    if beside is None:
        return ready

    def both(host: str, port: int) -> None:
        ready(host, port)
        beside.start()

    return both


def serve_beside(run: Callable[[], None], beside: Beside | None) -> None:
    """``run()`` (the proxy, until a signal stops it), then the viewer stopped too."""
    try:
        run()
    finally:
        if beside is not None:
            beside.stop()


def exit_report(recorder: Recorder, *, err: bool = False) -> None:
    """The recorder's counts line. A warning (something lost) was already logged; the clean
    count is for the user too."""
    if recorder.exit_line and not recorder.exit_warned:
        click.echo(recorder.exit_line, err=err)


@click.command()
@proxy_options
@web_option
@click.option(
    "--admin",
    metavar="HOST:PORT",
    help="Answer /healthz and /readyz here, for a load balancer or an alert (PORT alone: "
    "on 127.0.0.1; port 0: any free one, printed at start).",
)
def record(web: int | None, admin: str | None, **common: Any) -> None:
    """Run a recording proxy until Ctrl-C / SIGTERM."""
    if admin is not None:
        common["sets"] = (*common["sets"], f"ssetape_admin={admin}")
    beside = viewer(web, common["db"])
    ready = announce("record", common["db"], validate_mode(common["mode"]))
    runner, recorder = recording_runner(with_viewer(ready, beside), **common)
    serve_beside(lambda: serve(runner), beside)
    exit_report(recorder)


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
    default=RecordMode.NONE.value,
    show_default=True,
    type=click.Choice(RecordMode.names()),
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
@click.option(
    "--allow-gaps",
    is_flag=True,
    help="Serve recordings past the events they miss (default: stop at the first, and say so "
    "in an x-ssetape-incomplete header either way).",
)
@click.option(
    "--fault",
    multiple=True,
    metavar="SPEC",
    help=f"Serve a real outage at a chosen point (repeatable): {EXAMPLES}.",
)
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Replay processes sharing the port, for bursts of hundreds of streams (when nothing "
    "is forwarded). Each keeps its own order for a request recorded several times.",
)
@web_option
def replay(
    speed: float,
    record_mode: str,
    ignore_field: tuple[str, ...],
    match_host: bool,
    repeat: bool,
    allow_gaps: bool,
    fault: tuple[str, ...],
    workers: int,
    web: int | None,
    **common: Any,
) -> None:
    """Serve recorded streams back with their original timing, until Ctrl-C / SIGTERM."""
    db, mode = common["db"], common["mode"]
    try:
        faults = Faults(fault)
    except FaultError as e:
        raise click.BadParameter(str(e), param_hint="--fault") from None
    if fault:  # the timed server behind mitmproxy reads them from the environment
        os.environ[FAULTS_ENV] = "\n".join(fault)
    beside = viewer(web, db)
    # Nothing can go upstream: ssetape's own server answers, forward or reverse, with no proxy
    # in the data path. `--set` asks for mitmproxy's options, so it keeps mitmproxy.
    if workers > 1 and fault:
        raise click.BadParameter(
            "faults are served in order by one process", param_hint="--workers"
        )
    if not common["sets"] and _nothing_to_forward(db, record_mode):
        front: dict[str, Any] = {
            "host": common["host"], "port": common["port"], "speed": speed,
            "ignore": list(ignore_field), "match_host": match_host, "repeat": repeat,
            "allow_gaps": allow_gaps, "redact_headers": list(common["redact_header"]),
            "redact_fields": list(common["redact_field"]), "faults": faults or None,
            "confdir": common["confdir"], "workers": workers,
        }  # fmt: skip
        serve_beside(lambda: _replay_direct(db, validate_mode(mode), beside, front), beside)
        return
    if workers > 1:
        raise click.BadParameter(
            "more than one worker needs a replay that forwards nothing (record mode none, "
            "or once with a tape) and no --set",
            param_hint="--workers",
        )
    replayer = Replayer()
    runner = proxy_runner(
        [ConnectionGuard(), TlsFailures(), HandshakeSlots(), replayer, Recorder()],
        on_ready=with_viewer(announce("replay", db, validate_mode(mode)), beside),
        extra={
            "ssetape_speed": repr(speed),
            "ssetape_record_mode": record_mode,
            "ssetape_ignore_field": list(ignore_field),
            "ssetape_match_host": match_host,
            "ssetape_repeat": repeat,
            "ssetape_allow_gaps": allow_gaps,
            "connection_strategy": "lazy",
        },
        **common,
    )
    serve_beside(lambda: serve(runner), beside)
    if replayer.hits or replayer.misses:
        click.echo(f"ssetape: replayed {replayer.hits}, missed {replayer.misses}")


def _nothing_to_forward(db: str, record_mode: str) -> bool:
    """True when no request can go upstream: replay may bypass mitmproxy entirely."""
    mode = RecordMode(record_mode)
    if mode == RecordMode.NONE:
        return True
    if mode != RecordMode.ONCE:
        return False
    try:
        store = Store.open(db, create=False)
    except StoreError:
        return False  # no tape yet: `once` records
    try:
        return bool(store.exchanges(limit=1))
    finally:
        store.close()


def _replay_direct(db: str, mode: str, beside: Beside | None, front: dict[str, Any]) -> None:
    try:
        run_front(
            db,
            mode.partition(":")[2],  # empty in forward mode ("regular")
            on_ready=with_viewer(announce("replay", db, mode), beside),
            **front,
        )
    except (StoreError, ValueError, RuntimeError) as e:
        raise click.ClickException(str(e)) from None
    except OSError as e:
        where = f"{front['host']}:{front['port']}"
        raise click.ClickException(f"cannot listen on {where}: {e.strerror}") from None


@click.command()
@click.option("--confdir", default=DEFAULT_CONFDIR, show_default=True)
@click.option(
    "--bundle",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write a CA bundle (system roots + ssetape's CA) for SSL_CERT_FILE.",
)
def ca(confdir: str, bundle: Path | None) -> None:
    """Print where the proxy's CA certificate is and how to trust it (created if missing)."""
    d = Path(os.path.expanduser(confdir))
    CertStore.from_store(d, "mitmproxy", 2048)
    pem = d / "mitmproxy-ca-cert.pem"
    click.echo(f"CA certificate: {pem}")
    click.echo("Trust it for HTTPS recording, e.g. Python/httpx: SSL_CERT_FILE=<bundle>,")
    click.echo("requests: REQUESTS_CA_BUNDLE=<bundle>, Node: NODE_EXTRA_CA_CERTS=" + str(pem))
    if bundle is not None:
        bundle.write_bytes(ca_bundle(pem))
        click.echo(f"bundle (system roots + CA) written to {bundle}")


def ca_bundle(pem: Path) -> bytes:
    """Trusted roots (certifi's) plus the proxy's CA: one file for SSL_CERT_FILE and kin."""
    return Path(certifi.where()).read_bytes() + b"\n" + pem.read_bytes()
