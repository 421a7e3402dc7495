"""mitmproxy options that several ssetape addons share, declared the same way by each."""

from __future__ import annotations

import os
from collections.abc import Sequence

from mitmproxy import exceptions, http
from mitmproxy.addonmanager import Loader

from ssetape import redactor
from ssetape.cost.price_book import PriceBook, PriceDataError
from ssetape.redactor import Redactor
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
