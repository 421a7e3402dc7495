"""`ssetape run -- CMD ARGS...`: record what one command sends, with no change to it.

The recording proxy of `ssetape record` (forward mode, a free loopback port) runs in a thread
of this process for as long as the command does, and the command gets the proxy and the CA
through the variables each ecosystem reads (:data:`PROXY_VARS`, :data:`CA_VARS`). A thread,
not a second process: nothing outlives us if we are killed, and Ctrl-C at a terminal, which
reaches the command as well, cannot stop the recorder before the command has made its last
request; the recorder stops once the command has exited.

Standard output is the command's alone: everything ssetape says goes to standard error.

``--web``: the viewer of the store is served beside the proxy (see ``ssetape.web.server.
Beside``), so the command's exchanges appear in the page as they are recorded; once the
command has exited on its own, the viewer stays until Ctrl-C / SIGTERM (a signal that came
while the command ran stops everything with it).
"""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from types import FrameType
from typing import Any

import click

from ssetape.cli.options import capture_options, db_option, shown, web_option
from ssetape.cli.proxy import ca_bundle, exit_report, recording_runner, viewer, with_viewer
from ssetape.replay.proxy_runner import ProxyRunner, ProxyStartError

__all__ = ["CA_VARS", "PROXY_VARS", "child_env", "run"]

# Both spellings: curl reads only the lowercase http_proxy, Go and Python read either, Node's
# proxy support prefers the lowercase. ALL_PROXY is left alone: it would also send non-HTTP
# traffic (SOCKS-capable clients) to an HTTP proxy. NO_PROXY is left as the user has it:
# nothing is added, so loopback traffic is recorded too (an app tested against a local fake
# upstream is recorded); hosts the user lists there go direct, unrecorded.
PROXY_VARS = ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy")
# The trust store each reads: a bundle of certifi's roots plus ssetape's CA (hosts in
# NO_PROXY still need the real roots). Python (ssl, httpx, requests), curl, git, boto3
# (Bedrock), Deno, Node (which adds these to its own roots).
CA_VARS = (
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "GIT_SSL_CAINFO",
    "AWS_CA_BUNDLE",
    "DENO_CERT",
    "NODE_EXTRA_CA_CERTS",
)
# Node 22.21+/24.5+ proxy fetch() (and http/https) through the variables above when told to;
# older Node's fetch gets node_proxy.cjs, preloaded (it stands aside where Node does it).
NODE_PROXY = resources.files("ssetape.cli") / "node_proxy.cjs"
NOT_FOUND, NOT_EXECUTABLE = 127, 126  # as a shell says it
FORWARDED = (signal.SIGINT, signal.SIGTERM)
# How long the command waits for the viewer (--web) to be up; past it, it runs anyway.
_VIEWER_START_S = 10


def child_env(environ: Mapping[str, str], proxy_url: str, bundle: Path) -> dict[str, str]:
    """The command's environment: the user's, with the proxy and the CA bundle."""
    env = dict(environ)
    env.update(dict.fromkeys(PROXY_VARS, proxy_url))
    env.update(dict.fromkeys(CA_VARS, str(bundle)))
    env["NODE_USE_ENV_PROXY"] = "1"
    env["NODE_OPTIONS"] = f'--require "{NODE_PROXY}" {environ.get("NODE_OPTIONS", "")}'.strip()
    return env


class _Recording:
    """The recording proxy on a thread of its own, until :meth:`stop`."""

    def __init__(self) -> None:
        self.url = ""
        self.error: BaseException | None = None
        self.ready = threading.Event()
        # Not a daemon: at the stop it stores what is in flight, and that must finish.
        self.thread = threading.Thread(target=self._main, name="ssetape-run-proxy")

    def start(self, runner: ProxyRunner) -> None:
        self.runner = runner
        self.thread.start()

    def listening(self, host: str, port: int) -> None:
        self.url = f"http://{host}:{port}"
        self.ready.set()

    def _main(self) -> None:
        try:
            asyncio.run(self.runner.run())
        except BaseException as e:  # reported by the main thread, as `record` would
            self.error = e
        finally:
            self.ready.set()

    def stop(self) -> None:
        if self.thread.is_alive():  # else it ended on its own, an error kept in .error
            self.runner.shutdown()  # thread-safe: mitmproxy sets its exit event on its loop
        self.thread.join()


class _Signals:
    """SIGINT/SIGTERM while the command runs go to the command, which decides when we stop;
    before it runs, they cancel the run."""

    def __init__(self) -> None:
        self.child: subprocess.Popen[bytes] | None = None
        self.received: int | None = None
        self.stopped = threading.Event()
        self._forwarded = False
        self._old = {sig: signal.signal(sig, self._handle) for sig in FORWARDED}

    def _handle(self, sig: int, frame: FrameType | None) -> None:
        self.received = sig
        self.stopped.set()
        if self.child is not None:
            self._forward(sig)

    def adopt(self, child: subprocess.Popen[bytes]) -> None:
        """The command has started: from now on signals go to it, and one that came while it
        was starting (after the check before it, before this) goes to it now."""
        self.child = child
        if self.received is not None and not self._forwarded:
            self._forward(self.received)

    def wait(self, child: subprocess.Popen[bytes]) -> int:
        """The command's exit status. Polled, not one blocking wait: the kernel may hand a
        signal to the proxy's thread, and Python runs its handler in the main thread only
        once that thread wakes; a main thread blocked in waitpid() would never pass it on
        to the command, and the command would never end."""
        while True:
            try:
                return child.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                continue

    def _forward(self, sig: int) -> None:
        self._forwarded = True
        if self.child is not None and not _terminal_sent(sig):
            self.child.send_signal(sig)

    def restore(self) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


def _terminal_sent(sig: int) -> bool:
    """Ctrl-C at a terminal reaches its whole foreground process group, the command too (it
    is in ours): sending it once more would make it two, and a second SIGINT cuts short
    what an app does on the first. We are in that group when a terminal we use says so
    (then a SIGINT sent to us alone, by `kill -INT`, is not passed on: SIGTERM is)."""
    if sig != signal.SIGINT:
        return False
    for fd in (0, 1, 2):
        try:
            if os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp():
                return True
        except OSError:
            continue
    return False


def _exit_code(returncode: int) -> int:
    """The command's exit status as a shell reports it: 128 + N when signal N killed it."""
    return 128 - returncode if returncode < 0 else returncode


def _fail(command: str, why: str, code: int) -> None:
    click.echo(f"ssetape run: {command}: {why}", err=True)
    raise SystemExit(code)


def _where_to_look(db: str, web_url: str | None = None) -> str:
    """The last line: where the recording can be seen, the viewer if it serves."""
    if web_url:
        return (
            f"ssetape run: recorded into {shown(db)}; see: {web_url} "
            "(the viewer serves until Ctrl-C)"
        )
    return (
        f"ssetape run: recorded into {shown(db)}; see: ssetape list --db {shlex.quote(shown(db))}"
    )


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@db_option
@click.option(
    "--port",
    default=0,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Loopback port of the recording proxy (0: a free one).",
)
@web_option
@capture_options
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(command: tuple[str, ...], db: str, port: int, web: int | None, **capture: Any) -> None:
    """Record what one command sends: run it through a recording proxy, with the proxy and
    ssetape's CA in its environment, and exit with its exit code.

    \b
    ssetape run -- python app.py
    ssetape run --db tape.db -- node app.js
    ssetape run --web -- python app.py    (the viewer on http://127.0.0.1:8090)
    """
    # Our stdout is the command's: mitmproxy's log and our lines go to stderr.
    sys.stdout = sys.stderr
    program = command[0]
    if shutil.which(program) is None:
        exists = os.sep in program and Path(program).exists()
        _fail(program, "permission denied" if exists else "command not found",
              NOT_EXECUTABLE if exists else NOT_FOUND)  # fmt: skip
    signals = _Signals()
    try:
        code = _record_while(command, db, port, web, capture, signals)
    finally:
        signals.restore()
    raise SystemExit(code)


def _record_while(
    command: tuple[str, ...],
    db: str,
    port: int,
    web: int | None,
    capture: dict[str, Any],
    signals: _Signals,
) -> int:
    recording = _Recording()
    beside = viewer(web, db, err=True)
    runner, recorder = recording_runner(
        with_viewer(recording.listening, beside),
        db=db, mode="regular", host="127.0.0.1", port=port, **capture,
    )  # fmt: skip
    recording.start(runner)
    while not recording.ready.wait(0.1):  # a signal handler runs between waits
        pass
    if recording.error is not None:
        recording.thread.join()
        if beside is not None:
            beside.stop()
        _raise_start_error(recording.error, port)
    click.echo(f"ssetape run: recording through {recording.url} into {shown(db)}", err=True)
    if beside is not None:  # its URL before the command's first request, for the page
        beside.settled.wait(_VIEWER_START_S)
    try:
        if signals.received is not None:  # stopped before the command could start
            code = 128 + signals.received
        else:
            code = _run_command(command, recording.url, Path(capture["confdir"]), signals)
    finally:
        recording.stop()  # whatever happened: its thread would keep us alive
    if recording.error is not None:  # the proxy died while the command ran
        click.echo(f"ssetape run: the recorder stopped early: {recording.error!r}", err=True)
    exit_report(recorder, err=True)
    if beside is None:
        click.echo(_where_to_look(db), err=True)
        return code
    try:
        if signals.received is None and beside.url:  # the command ended on its own
            signals.child = None
            click.echo(_where_to_look(db, beside.url), err=True)
            while not signals.stopped.wait(0.2):  # a signal handler runs between waits
                pass
        else:
            click.echo(_where_to_look(db), err=True)
    finally:
        beside.stop()
    return code


def _run_command(command: tuple[str, ...], proxy_url: str, confdir: Path, signals: _Signals) -> int:
    pem = Path(os.path.expanduser(confdir)) / "mitmproxy-ca-cert.pem"  # the proxy made it
    with tempfile.TemporaryDirectory(prefix="ssetape-run-") as tmp:
        bundle = Path(tmp) / "ca-bundle.pem"
        bundle.write_bytes(ca_bundle(pem))
        try:
            child = subprocess.Popen(command, env=child_env(os.environ, proxy_url, bundle))
        except FileNotFoundError:
            click.echo(f"ssetape run: {command[0]}: command not found", err=True)
            return NOT_FOUND
        except OSError as e:
            click.echo(f"ssetape run: {command[0]}: {e.strerror}", err=True)
            return NOT_EXECUTABLE
        signals.adopt(child)
        return _exit_code(signals.wait(child))


def _raise_start_error(error: BaseException, port: int) -> None:
    if isinstance(error, ProxyStartError):
        raise click.ClickException(str(error))
    if isinstance(error, OSError):
        raise click.ClickException(f"cannot listen on 127.0.0.1:{port}: {error.strerror}")
    raise error
