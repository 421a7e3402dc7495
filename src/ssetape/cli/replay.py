"""`ssetape replay`: serve recorded streams back with their timing, through ssetape's own
replay server, or through mitmproxy where a `--set` asks for it."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import click

from ssetape.addons.guard import ConnectionGuard
from ssetape.addons.handshakes import HandshakeSlots
from ssetape.addons.logs import Logs
from ssetape.addons.recorder import Recorder
from ssetape.addons.replayer import Replayer
from ssetape.addons.tls_failures import TlsFailures
from ssetape.cli.options import (
    proxy_options,
    validate_mode,
    web_option,
)
from ssetape.cli.proxy import announce, proxy_runner, serve, serve_beside, viewer, with_viewer
from ssetape.recording.log_format import LogLines, instance_name, log_to
from ssetape.replay.direct_front import run_front
from ssetape.replay.episodes import RecordingChild, recording_args
from ssetape.replay.faults import EXAMPLES, FaultError, Faults
from ssetape.replay.timed_server import FAULTS_ENV
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store, StoreError
from ssetape.vocabulary import LogFormat, RecordMode

if TYPE_CHECKING:
    from ssetape.web.server import Beside


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
    help="Replay processes sharing the port, for bursts of hundreds of streams (record modes "
    "none, new_episodes, once with a tape). Each keeps its own order for a request recorded "
    "several times; new_episodes records a miss once for all of them.",
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
    # new_episodes: mitmproxy only forwards misses, so `--set` configures that side; every
    # worker relays its misses to that one recording proxy.
    episodes = record_mode == RecordMode.NEW_EPISODES
    if episodes or (not common["sets"] and _nothing_to_forward(db, record_mode)):
        front: dict[str, Any] = {
            "host": common["host"], "port": common["port"], "speed": speed,
            "ignore": list(ignore_field), "match_host": match_host, "repeat": repeat,
            "allow_gaps": allow_gaps, "redact_headers": list(common["redact_header"]),
            "redact_fields": list(common["redact_field"]), "faults": faults or None,
            "confdir": common["confdir"], "workers": workers,
        }  # fmt: skip
        name = instance_name(common["port"], common["name"])  # no mitmproxy: its lines here
        log_to(LogLines(name, LogFormat(common["log_format"])))
        # new_episodes: misses go to a recording proxy (docs/REPLAY.md).
        child = RecordingChild(recording_args(common)) if episodes else None
        serve_beside(lambda: _replay_direct(db, validate_mode(mode), beside, front, child), beside)
        return
    if workers > 1:
        raise click.BadParameter(
            "more than one worker needs ssetape's own replay server: record mode none or "
            "once with a tape, without --set; or new_episodes",
            param_hint="--workers",
        )
    replayer, recorder = Replayer(), Recorder()
    runner = proxy_runner(
        [Logs(recorder), ConnectionGuard(), TlsFailures(), HandshakeSlots(), replayer, recorder],
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
        return bool(Queries(store).exchanges(limit=1))
    finally:
        store.close()


def _replay_direct(db: str, mode: str, beside: Beside | None, front: dict[str, Any],
                   child: RecordingChild | None = None) -> None:  # fmt: skip
    try:
        # First: it creates the store when there is none yet.
        recorder = child.start() if child is not None else None
        run_front(
            db,
            mode.partition(":")[2],  # empty in forward mode ("regular")
            on_ready=with_viewer(announce("replay", db, mode), beside),
            recorder=recorder,
            **front,
        )
    except (StoreError, ValueError, RuntimeError) as e:
        raise click.ClickException(str(e)) from None
    except OSError as e:
        where = f"{front['host']}:{front['port']}"
        raise click.ClickException(f"cannot listen on {where}: {e.strerror}") from None
    finally:
        if child is not None:
            child.stop()
