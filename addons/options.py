"""mitmproxy options that several ssetape addons share, declared the same way by each."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Sequence

from mitmproxy import exceptions, http
from mitmproxy.addonmanager import Loader
from mitmproxy.optmanager import OptManager

from ssetape import redactor
from ssetape.cost.price_book import PriceBook, PriceDataError
from ssetape.recording.protocol import RetentionPolicy
from ssetape.redactor import Redactor
from ssetape.storage.engine import resolve_target
from ssetape.storage.filters import parse_since
from ssetape.storage.store import Store, StoreError
from ssetape.vocabulary import MAX_SESSION, Header, check_session, session_of


def default_db() -> str:
    return os.environ.get("SSETAPE_DB") or "ssetape.db"


def add_store_options(loader: Loader) -> None:
    loader.add_option(
        "ssetape_db",
        str,
        "",
        "Where ssetape stores recordings: a file path (SQLite) or an SQLAlchemy URL such as "
        "postgresql+psycopg://user@host/db. Default: $SSETAPE_DB, else ./ssetape.db.",
    )
    loader.add_option(
        "ssetape_redact_header",
        Sequence[str],
        [],
        "Extra header names whose values are replaced by a keyed fingerprint before storage "
        "(Authorization, x-api-key, api-key, cookies are always redacted).",
    )
    loader.add_option(
        "ssetape_redact_field",
        Sequence[str],
        [],
        "JSON request body fields to redact before storage: a dotted path (metadata.token) "
        "or a bare name matched at any depth (api_key).",
    )


def check_paths(option: str, paths: Sequence[str]) -> None:
    try:
        redactor.check_paths(option, paths)
    except ValueError as e:
        raise exceptions.OptionsError(str(e)) from None


def check_target(target: str) -> None:
    """An OptionsError (one line) for a ``ssetape_db`` that names no store at all (a bad URL,
    an unsupported database), found without connecting to it."""
    try:
        resolve_target(target or default_db())
    except StoreError as e:
        raise exceptions.OptionsError(str(e)) from None


def open_store(target: str, *, create: bool = True) -> Store:
    try:
        return Store.open(target or default_db(), create=create)
    except StoreError as e:
        raise exceptions.OptionsError(str(e)) from None


def store_redactor(store: Store, headers: Sequence[str], fields: Sequence[str]) -> Redactor:
    """The store's redactor (see Store.redactor), the field option checked first."""
    check_paths("ssetape_redact_field", fields)
    return store.redactor(headers, fields)


def seconds(option: str, value: str, low: float = 0.1, high: float = 3600) -> float:
    """``value`` (a string option) as seconds within [low, high], or a one-line OptionsError."""
    try:
        n = float(value)
    except ValueError:
        n = float("nan")
    if not low <= n <= high:
        raise exceptions.OptionsError(
            f"{option}: {value!r} is not a number of seconds between {low:g} and {high:g}"
        )
    return n


def at_least(option: str, value: int, least: int) -> int:
    if value < least:
        raise exceptions.OptionsError(f"{option}: {value} is below the least allowed, {least}")
    return value


def add_session_option(loader: Loader) -> None:
    loader.add_option(
        "ssetape_session",
        str,
        "",
        f"The session (at most {MAX_SESSION} printable characters) of every exchange whose "
        f"request names none in an {Header.SESSION} header; a change applies to the "
        "exchanges after it.",
    )


def configured_session(value: str) -> str | None:
    """``ssetape_session`` checked: None when empty, a one-line OptionsError when bad."""
    try:
        return check_session(value) or None
    except ValueError as e:
        raise exceptions.OptionsError(f"ssetape_session: {e}") from None


def take_session(req: http.Request) -> str | None:
    """The session the request names, its header removed: it must never reach the upstream
    (nor the store's copy of the headers). Only the request head is needed: a body that
    streams has not passed yet."""
    values = req.headers.get_all(Header.SESSION)
    if not values:
        return None
    del req.headers[Header.SESSION]
    return next(filter(None, map(session_of, values)), None)


def add_price_data_option(loader: Loader) -> None:
    loader.add_option(
        "ssetape_price_data",
        str,
        "",
        "A genai-prices data.json to price exchanges with (today's prices offline); "
        "empty: the data of the installed genai-prices release.",
    )


def configured_price_data(value: str, updated: set[str]) -> str | None:
    """``ssetape_price_data`` checked: read whole once when set, so that a file that is not
    price data is a one-line OptionsError, not a recording process that cannot price."""
    if not value:
        return None
    if "ssetape_price_data" in updated:
        try:
            PriceBook.from_file(value)
        except PriceDataError as e:
            raise exceptions.OptionsError(f"ssetape_price_data: {e}") from None
    return value


def add_retention_options(loader: Loader) -> None:
    loader.add_option(
        "ssetape_retain",
        str,
        "",
        "Prune on a schedule the exchanges that started longer ago than this duration "
        "(30d, 12h, 2w), in the recording process; empty: keep everything.",
    )
    loader.add_option(
        "ssetape_retain_events",
        str,
        "",
        "Prune only the events and wire chunks (the bulk) of exchanges older than this "
        "duration, keeping their summary rows; shorter than ssetape_retain. Empty: keep them.",
    )
    loader.add_option(
        "ssetape_retain_every",
        str,
        "1h",
        "How often ssetape_retain and ssetape_retain_events prune (the first time a few "
        "seconds after the recording process starts).",
    )


def duration(option: str, value: str, least: float = 1.0) -> float | None:
    """A duration option (``30d``, ``12h``, ``90m``, ``2w``; ``--since``'s durations) in
    seconds, at least ``least``; None when empty; a one-line OptionsError otherwise. A date
    is refused: a retention window rolls."""
    text = value.strip()
    if not text:
        return None
    bad = f"{option}: {value!r} is not a duration like 30d, 12h or 90m"
    try:
        dt.datetime.fromisoformat(text)
    except ValueError:
        pass
    else:
        raise exceptions.OptionsError(f"{bad} (a date; the window rolls, give its length)")
    now = dt.datetime.now(dt.UTC)
    try:
        span = (now - parse_since(text, now)).total_seconds()
    except ValueError:
        raise exceptions.OptionsError(bad) from None
    if span < least:
        raise exceptions.OptionsError(f"{option}: {value!r} is shorter than {least:g} s")
    return span


def configured_retention(options: OptManager) -> RetentionPolicy | None:
    """The ``ssetape_retain*`` options (of ``ctx.options``) checked: None when both prunes
    are off."""
    retain, events = options.ssetape_retain, options.ssetape_retain_events
    exchanges = duration("ssetape_retain", retain)
    events_s = duration("ssetape_retain_events", events)
    every_s = duration("ssetape_retain_every", options.ssetape_retain_every)
    if exchanges is not None and events_s is not None and events_s >= exchanges:
        raise exceptions.OptionsError(
            f"ssetape_retain_events: {events!r} must be shorter than ssetape_retain ({retain!r}): "
            "older exchanges go whole"
        )
    if exchanges is None and events_s is None:
        return None
    if every_s is None:
        raise exceptions.OptionsError("ssetape_retain_every: empty; give a duration like 1h")
    return RetentionPolicy(exchanges=exchanges, events=events_s, every=every_s)
