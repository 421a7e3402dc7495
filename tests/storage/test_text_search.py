"""`--grep` on PostgreSQL: trigram indexes where the pg_trgm extension can be had (migration
0011), a scan with one warning where it cannot; the same matches either way."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import make_url

from ssetape.storage.filters import ExchangeFilter
from ssetape.storage.models import Exchange
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from tests.addons.stores import pg_database, pg_schema

TRIGRAMS = {"ix_exchanges_output_text_trgm", "ix_exchanges_path_trgm"}


def _grep(store: Store, fields: Callable[..., dict[str, Any]], word: str) -> list[str]:
    with store.Session.begin() as s:
        for n, out in enumerate(["a plain answer", "in zanzibar, 100%_sure", "none"]):
            s.add(Exchange(uid=f"{n:032d}", **fields(output_text=out)))
    return [x.uid for x in Queries(store).exchanges(ExchangeFilter(text=word))]


def _indexes(store: Store) -> set[str]:
    return {ix["name"] for ix in inspect(store.engine).get_indexes("exchanges")} & TRIGRAMS


def test_grep_is_indexed_where_the_extension_can_be_had(exchange_fields: Any) -> None:
    with pg_schema() as url, Store.open(url) as store:  # skips without a server
        assert _indexes(store) == TRIGRAMS
        assert _grep(store, exchange_fields, "zanzibar, 100%_") == [f"{1:032d}"]


def test_without_the_extension_grep_scans_and_says_so_once(
    exchange_fields: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A role that may not create extensions, in a database that has none: the store
    opens with one warning, and --grep finds the same."""
    role = f"ssetape_test_{secrets.token_hex(6)}"
    with pg_database() as db:
        with db.admin.connect() as conn:
            conn.execute(text(f'CREATE ROLE "{role}" LOGIN'))
        try:
            owner = create_engine(db.url, isolation_level="AUTOCOMMIT")
            with owner.connect() as conn:
                conn.execute(text(f'CREATE SCHEMA s AUTHORIZATION "{role}"'))
            owner.dispose()
            url = (
                make_url(db.url)
                .set(username=role)
                .update_query_dict({"options": "-csearch_path=s"})
            )
            with caplog.at_level(logging.WARNING, "ssetape.storage"):
                store = Store.open(url.render_as_string(hide_password=False))
            try:
                warned = [r.getMessage() for r in caplog.records if "pg_trgm" in r.getMessage()]
                assert len(warned) == 1 and "--grep reads every exchange" in warned[0], warned
                assert _indexes(store) == set()
                assert _grep(store, exchange_fields, "zanzibar, 100%_") == [f"{1:032d}"]
            finally:
                store.close()
        finally:
            with db.admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{db.name}" WITH (FORCE)'))
                conn.execute(text(f'DROP ROLE IF EXISTS "{role}"'))
