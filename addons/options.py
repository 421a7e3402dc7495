"""mitmproxy options that several ssetape addons share, declared the same way by each."""

from __future__ import annotations

import os
import secrets
from collections.abc import Sequence

import orjson
from mitmproxy import exceptions
from mitmproxy.addonmanager import Loader

from ssetape.redactor import Redactor
from ssetape.storage.store import Store, StoreError


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
    for p in paths:
        if not p.strip() or any(not part for part in p.strip().split(".")):
            raise exceptions.OptionsError(f"{option}: bad JSON path {p!r} (use a.b.c)")


def open_store(target: str, *, create: bool = True) -> Store:
    try:
        return Store.open(target or default_db(), create=create)
    except StoreError as e:
        raise exceptions.OptionsError(str(e)) from None


def redactor_for(store: Store, headers: Sequence[str], fields: Sequence[str]) -> Redactor:
    """The store's redactor: its key lives in the store, so masks are stable per store.

    Fields redacted by any recording into this store stay redacted for every later user of
    it (replay must mask incoming requests the same way to match them).
    """
    check_paths("ssetape_redact_field", fields)
    key = store.get_or_create_setting("redaction_key", lambda: secrets.token_hex(32))
    known = orjson.loads(store.setting("redact_fields") or "[]")
    merged = sorted(set(known) | {f.strip() for f in fields})
    if merged != known:
        store.set_setting("redact_fields", orjson.dumps(merged).decode())
    return Redactor(bytes.fromhex(key), headers=headers, fields=merged)
