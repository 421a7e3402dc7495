"""The storage tests' fixtures (real SQLite files, a real PostgreSQL schema), for the analyses
stored in them."""

from tests.storage.conftest import event_rows, exchange_fields, store, store_url

__all__ = ["event_rows", "exchange_fields", "store", "store_url"]
