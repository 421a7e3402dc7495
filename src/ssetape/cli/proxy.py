"""`ssetape record` and `ca`, and what every command that runs a proxy shares (`replay` is
in cli/replay.py)."""

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
from ssetape.addons.drain import Drain, settled
from ssetape.addons.guard import ConnectionGuard
from ssetape.addons.logs import Logs
from ssetape.addons.metrics import Metrics
from ssetape.addons.otlp import Otlp
from ssetape.addons.recorder import Recorder
from ssetape.addons.tls_failures import TlsFailures
from ssetape.addons.websockets import WebSockets
from ssetape.cli.options import (
    DEFAULT_CONFDIR,
    proxy_options,
    shown,
    validate_mode,
    web_option,
)
from ssetape.replay.proxy_runner import ProxyRunner, ProxyStartError
from ssetape.vocabulary import LogFormat

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
    name: str = "",
    log_format: str = LogFormat.TEXT,
) -> ProxyRunner:
    """mitmproxy with ``addons`` and the options of ``proxy_options`` plus ``extra``."""
    options = {
        "ssetape_name": name,
        "ssetape_log_format": log_format,
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
    # Drain before the recorder (at the stop it hands it the end of the exit line); Admin
    # after it: /readyz says "stopping" while the recorder stores the rest.
    drain = Drain(recorder)
    admin = Admin(recorder, drain)
    addons = [Logs(recorder), ConnectionGuard(), TlsFailures(), Control(recorder), drain,
              WebSockets(recorder), recorder, admin, Metrics(recorder, admin),
              Otlp(recorder)]  # fmt: skip

    def ready(host: str, port: int) -> None:
        on_ready(host, port)
        # The ports chosen, for --admin HOST:0 (--metrics at another address: a line more).
        for url, paths in admin_lines(admin):
            click.echo(f"ssetape admin: listening on {url} ({paths})")
        sys.stdout.flush()

    runner = proxy_runner(addons, extra=lazy, on_ready=ready, **common)
    return runner, recorder


def admin_lines(admin: Admin) -> list[tuple[str, str]]:
    """Where the admin server listens (each listener answers every path), and the paths."""
    health, metrics = admin.url_for("ssetape_admin"), admin.url_for("ssetape_metrics")
    paths = "/healthz, /readyz" + (", /metrics" if metrics is not None else "")
    return [(url, paths) for url in dict.fromkeys(u for u in (health, metrics) if u)]


def serve(runner: ProxyRunner) -> None:
    """Run ``runner`` until it is stopped; a one-line error if it cannot start."""
    try:
        asyncio.run(settled(runner.run()))
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
@click.option(
    "--drain-timeout",
    type=click.FloatRange(0, 86400),
    metavar="SECONDS",
    help="At the first SIGTERM or Ctrl-C, refuse new connections and let the exchanges in "
    "flight finish for this long, then interrupt the rest; a second signal stops at once. "
    "0: stop at once.  [default: 30]",
)
@click.option(
    "--metrics",
    metavar="HOST:PORT",
    help="Serve Prometheus metrics at /metrics here (with /healthz and /readyz; the --admin "
    "address may be the same). Needs the metrics extra: pip install 'ssetape[metrics]'.",
)
@click.option("--otlp", is_flag=True, help="Send a span per stored exchange over OTLP/HTTP, "
              "where OTEL_EXPORTER_OTLP_* say. Needs: pip install 'ssetape[otlp]'.")  # fmt: skip
def record(
    web: int | None,
    admin: str | None,
    drain_timeout: float | None,
    metrics: str | None,
    otlp: bool,
    **common: Any,
) -> None:
    """Run a recording proxy until Ctrl-C / SIGTERM."""
    if admin is not None:
        common["sets"] = (*common["sets"], f"ssetape_admin={admin}")
    if metrics is not None:
        common["sets"] = (*common["sets"], f"ssetape_metrics={metrics}")
    if otlp:
        common["sets"] = (*common["sets"], "ssetape_otlp=true")
    if drain_timeout is not None:  # else ssetape_drain_timeout's own (a --set may give it)
        common["sets"] = (*common["sets"], f"ssetape_drain_timeout={drain_timeout:g}")
    beside = viewer(web, common["db"])
    ready = announce("record", common["db"], validate_mode(common["mode"]))
    runner, recorder = recording_runner(with_viewer(ready, beside), **common)
    serve_beside(lambda: serve(runner), beside)
    exit_report(recorder)


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
