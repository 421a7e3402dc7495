"""What several commands share: their options, parameter types and how they open a store."""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click
import orjson

from ssetape.analysis.profiles import DEFAULT_PROFILE, parse_profile_overrides, profile_names
from ssetape.cli.params import ApiChoice, SpanParam, TimeParam
from ssetape.vocabulary import (
    DEFAULT_FAULT,
    ERROR_OUTCOMES,
    MAX_NAME,
    MAX_SESSION,
    LogFormat,
    check_name,
    check_session,
    fault_choices,
    outcome_choices,
)

# The store (SQLAlchemy) and the price book are imported where they are used: every command
# module builds its options from here at import, and `ssetape CMD --help` needs neither.
if TYPE_CHECKING:
    from ssetape.storage.standby import StandbyState
    from ssetape.storage.store import Store

__all__ = [
    "DEFAULT_CONFDIR",
    "ApiChoice",
    "SpanParam",
    "TimeParam",
    "capture_options",
    "db_option",
    "fault_count_option",
    "filter_options",
    "open_db",
    "open_reader",
    "open_untouched",
    "price_data_option",
    "print_json",
    "profile_option",
    "proxy_options",
    "read_db_option",
    "reader_options",
    "session_option",
    "shown",
    "size_option",
    "standby_note",
    "stat_filter_options",
    "validate_mode",
    "web_option",
]

DB_HELP = "SQLite file or SQLAlchemy URL (postgresql+psycopg://...). Env: SSETAPE_DB."
DEFAULT_CONFDIR = "~/.mitmproxy"
F = TypeVar("F", bound=Callable[..., Any])
_SIZE = re.compile(r"^\s*(\d+)\s*([kmg]i?b?|b)?\s*$", re.IGNORECASE)

db_option = click.option(
    "--db", envvar="SSETAPE_DB", default="ssetape.db", show_default=True, help=DB_HELP
)

READ_DB_HELP = (
    "Read from this store instead of --db: a hot standby (or read replica) of it, so that "
    "readers never load the primary the recorders write to. Checked, never migrated or "
    "written. Env: SSETAPE_READ_DB."
)
read_db_option = click.option(
    "--read-db", envvar="SSETAPE_READ_DB", default=None, metavar="URL", help=READ_DB_HELP
)


def reader_options(f: F) -> F:
    """Where a read-only command reads: --db, or --read-db (a standby) when given."""
    return _apply(f, [db_option, read_db_option])


# `--web` alone: the port `ssetape web` listens on by default.
WEB_PORT = 8090
web_option = click.option(
    "--web",
    type=click.IntRange(0, 65535),
    is_flag=False,
    flag_value=WEB_PORT,
    default=None,
    metavar="[PORT]",
    help=f"Also serve the viewer of the store (ssetape web) on 127.0.0.1:PORT (--web alone: "
    f"{WEB_PORT}; 0: a free port), until Ctrl-C / SIGTERM.",
)


def _profiles(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> dict[str, str]:
    try:
        return parse_profile_overrides(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


profile_option = click.option(
    "--profile",
    "profiles",
    multiple=True,
    metavar="HOST=NAME",
    callback=_profiles,
    help=f"Read HOST's streams under provider profile NAME ({', '.join(profile_names())}); "
    "'.example.com' or '*.example.com' names a domain, HOST:PORT one port. Default: the "
    f"profile naming the host, else {DEFAULT_PROFILE} (repeatable).",
)


def _session(ctx: click.Context, param: click.Parameter, value: str | None) -> str:
    try:
        return check_session(value or "")
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


session_option = click.option(
    "--session",
    metavar="NAME",
    callback=_session,
    help=f"Name the session of every exchange whose request names none in an "
    f"x-ssetape-session header (at most {MAX_SESSION} printable characters).",
)


def _name(ctx: click.Context, param: click.Parameter, value: str | None) -> str:
    try:
        return check_name(value or "")
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


# A proxy's log lines and run rows (addons.logs): ssetape_name, ssetape_log_format.
log_options = [
    click.option("--name", default="", callback=_name, metavar="NAME",
                 help=f"This instance's name, in every log line and in its run rows (ssetape "
                      f"stats --runs): at most {MAX_NAME} printable characters, no spaces. "
                      "Default: HOST:PORT."),
    click.option("--log-format", type=click.Choice([f.value for f in LogFormat]),
                 default=LogFormat.TEXT.value, show_default=True,
                 help="text: a date, a level, ssetape[NAME] and the message; json: one "
                      "object per line (ts, level, name, logger, msg, and its counts)."),
]  # fmt: skip


def open_db(db: str, *, create: bool = False) -> Store:
    """Open a store for a command: a one-line error if that fails. Exchanges left
    ``recording`` by a recorder that is gone (crash, kill -9) show as ``interrupted``."""
    from ssetape.storage.runs import Runs
    from ssetape.storage.standby import is_standby
    from ssetape.storage.store import Store, StoreError

    try:
        store = Store.open(db, create=create)
    except StoreError as e:
        raise click.ClickException(str(e)) from None
    # Nothing can be written on a hot standby: do not even try there.
    if not is_standby(store.engine):
        with contextlib.suppress(Exception):  # a read-only user still gets to read
            Runs(store).mark_gone_interrupted()
    return store


def open_untouched(db: str, read_db: str | None) -> Store:
    """A store opened read-only, for a reader that says it writes nothing (MCP's tools are
    declared ``readOnlyHint``; the viewer is a read-only page): not even what `ssetape list`
    does on opening the primary (mark a dead recorder's exchanges ``interrupted``), which is
    left to recorders and the commands that write. The primary's schema is still brought to
    this ssetape's first, as every command that opens it does, so an upgrade needs no step
    before a reader can read; then every query runs in a read-only transaction (PostgreSQL).
    A standby (``--read-db``) and a cassette (read from a private copy) are opened as `list`
    opens them."""
    if read_db or (db.endswith(".jsonl") and "://" not in db):
        return open_reader(db, read_db)
    from ssetape.storage.store import Store, StoreError

    try:
        Store.open(db, create=False).close()
        return Store.open_read_only(db)
    except StoreError as e:
        raise click.ClickException(str(e)) from None


def open_reader(db: str, read_db: str | None, *, create: bool = False) -> Store:
    """Open the store a read-only command reads: ``--read-db`` when given (a standby: checked,
    never migrated, nothing marked; ``--db`` is then not opened at all), else ``--db`` as
    ``open_db`` does. A cassette (``--db tape.jsonl``) is read from a private copy of it in
    a temporary SQLite file, gone when the command exits."""
    if not read_db and db.endswith(".jsonl") and "://" not in db:
        import atexit
        import shutil
        import tempfile
        from pathlib import Path

        from ssetape.cassettes.cassette import Cassette, CassetteError
        from ssetape.storage.store import Store

        tmp = tempfile.mkdtemp(prefix="ssetape-cassette-")
        atexit.register(shutil.rmtree, tmp, True)
        store = Store.open(str(Path(tmp) / "cassette.db"))
        try:
            Cassette(Path(db)).import_into(store)
        except (CassetteError, OSError) as e:
            store.close()
            raise click.ClickException(str(e)) from None
        return store
    if not read_db:
        return open_db(db, create=create)
    from ssetape.storage.store import Store, StoreError

    try:
        return Store.open_read_only(read_db)
    except StoreError as e:
        raise click.ClickException(f"--read-db: {e}") from None


def standby_note(store: Store) -> StandbyState | None:
    """How current a store read through a standby is; None on a primary or SQLite."""
    from ssetape.storage.standby import standby_state

    return standby_state(store.engine)


def shown(db: str) -> str:
    """The database as it may be printed: no password."""
    from sqlalchemy import make_url

    return make_url(db).render_as_string(hide_password=True) if "://" in db else db


def print_json(obj: Any) -> None:
    sys.stdout.buffer.write(orjson.dumps(obj, option=orjson.OPT_INDENT_2) + b"\n")


def _apply(f: F, decorators: list[Callable[[F], F]]) -> F:
    for d in reversed(decorators):
        f = d(f)
    return f


def proxy_options(f: F) -> F:
    """The options every proxy command takes."""
    return _apply(f, [
        db_option,
        click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535)),
        click.option("--host", default="127.0.0.1", show_default=True,
                     help="Address to listen on; anything but loopback exposes the proxy."),
        click.option("--mode", default="regular", show_default=True,
                     help="'regular' (forward proxy) or 'reverse:https://api.openai.com'."),
        capture_options,
    ])  # fmt: skip


def _price_data(ctx: click.Context, param: click.Parameter, value: str | None) -> str:
    if not value:
        return ""
    # Here: genai-prices' data and its reader are for the commands that price, when asked.
    from ssetape.cost.price_book import PriceBook, PriceDataError

    try:  # one read now, so that a wrong file stops the command before anything starts
        PriceBook.from_file(value)
    except PriceDataError as e:
        raise click.BadParameter(str(e)) from None
    return value


price_data_option = click.option(
    "--price-data",
    metavar="FILE",
    callback=_price_data,
    help="Price exchanges with this genai-prices data.json (today's prices, offline) "
    "instead of the installed genai-prices release's.",
)


def capture_options(f: F) -> F:
    """What a proxy takes besides where it listens: redaction, profiles, its CA, mitmproxy's
    options (``ssetape run`` takes these alone: it listens where it chooses)."""
    return _apply(f, [
        click.option("--redact-header", multiple=True,
                     help="Extra header to redact (repeatable)."),
        click.option("--redact-field", multiple=True,
                     help="JSON body field to redact: dotted path or bare name (repeatable)."),
        profile_option,
        session_option,
        price_data_option,
        click.option("--confdir", default=DEFAULT_CONFDIR, show_default=True,
                     help="mitmproxy's directory (CA certificate)."),
        click.option("--set", "sets", multiple=True, metavar="OPTION=VALUE",
                     help="Any mitmproxy option, e.g. --set ssl_insecure=true."),
        *log_options,
    ])  # fmt: skip


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


# Who fails an exchange (vocabulary.Fault), as the options that take one say it.
_FAULTS = (
    "provider (an error event, an HTTP 5xx or 429, a cut stream), client (an HTTP 4xx, or it "
    "went away), network (no response), ssetape (the recorder stopped or died first), any"
)


def filter_options(f: F) -> F:
    """The options of ``storage.filters.ExchangeFilter``, passed to the command as keyword
    arguments (``ExchangeFilter.pop`` takes them back out)."""
    fault = click.option(
        "--fault", type=click.Choice(fault_choices()),
        help=f"Only the exchanges this one failed (or, the client, went away from): {_FAULTS}.",
    )  # fmt: skip
    return _apply(f, _filters(fault))


def stat_filter_options(f: F) -> F:
    """:func:`filter_options` but ``--fault``, which `stats` takes as :func:`fault_count_option`."""
    return _apply(f, _filters(None))


fault_count_option = click.option(
    "--fault",
    type=click.Choice(fault_choices()),
    default=DEFAULT_FAULT.value,
    show_default=True,
    help=f"Count as failed only the failures of this one (the rest are counted apart): {_FAULTS}.",
)


def _filters(fault: Callable[[F], F] | None) -> list[Callable[[F], F]]:
    return [
        click.option("--api", type=ApiChoice(), help="Only this API kind."),
        click.option("--model", help="Only this model (exact or prefix)."),
        click.option("--outcome", type=click.Choice(outcome_choices()),
                     help="Only this outcome; failed: any failed one "
                          f"({', '.join(sorted(ERROR_OUTCOMES))}), whoever's fault."),
        *([fault] if fault is not None else []),
        click.option("--since", type=TimeParam(),
                     help="Only since a time: 30m, 1h, 2d or 2026-11-01."),
        click.option("--grep", "text", metavar="TEXT",
                     help="Only where the request's text (the prompt), the output text or "
                          "the path has TEXT; list shows where, and the text around it."),
        click.option("--session", metavar="NAME", help="Only this session's exchanges."),
        *_range_options(),
    ]  # fmt: skip


# The timings a range filter bounds (storage.filters.RANGES), as its options name them.
_RANGES = {"duration": "duration", "ttfb": "TTFB", "ttft": "TTFT", "gap": "longest gap"}


def _range_options() -> list[Callable[[F], F]]:
    """--min-ttft 2s, --max-duration 1.5s, ...: each end included; an exchange without the
    timing is in no range of it."""
    return [
        click.option(f"--{end}-{name}", f"{end}_{name}", type=SpanParam(f"--{end}-{name}"),
                     metavar="TIME", help=f"Only a {what} of {word} TIME (250ms, 2s, 1.5s).")
        for name, what in _RANGES.items()
        for end, word in (("min", "at least"), ("max", "at most"))
    ]  # fmt: skip


def _size(ctx: click.Context, param: click.Parameter, value: str | int) -> int:
    """Sizes as bytes or with a unit: 64MiB, 512k, 2G (binary units)."""
    if isinstance(value, int):
        return value
    m = _SIZE.match(value)
    if m is None or int(m.group(1)) < 1:
        raise click.BadParameter(f"{value!r} is not a size (e.g. 1048576, 64MiB, 2G)")
    unit = (m.group(2) or "b")[0].lower()
    return int(m.group(1)) * {"b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}[unit]


def size_option(name: str, default: int, shown_default: str, help: str) -> Callable[[F], F]:
    """An option taking a size: bytes, or 64MiB, 512k, 2G (binary units)."""
    return click.option(
        name, default=str(default), callback=_size, show_default=shown_default, help=help
    )
