"""Fixtures for the storage tests: real SQLite files and a real PostgreSQL server.

PostgreSQL runs only with SSETAPE_TEST_PG_URL set (for example
``postgresql+psycopg://postgres@127.0.0.1:5432/test``); every test then gets a
fresh schema of its own, dropped afterwards, so runs never see each other.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ssetape.records import EventRow
from ssetape.storage.store import Store
from tests.addons.stores import pg_schema

PG_ENV = "SSETAPE_TEST_PG_URL"


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
        return
    with pg_schema() as url:  # a fresh schema, dropped afterwards (skips without a server)
        yield url


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    s = Store.open(store_url)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def exchange_fields() -> Callable[..., dict[str, Any]]:
    """Column values for a plausible streamed exchange (as the recorder sets them)."""

    def make(**overrides: Any) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "started_at": dt.datetime.now(dt.UTC),
            "method": "POST",
            "scheme": "https",
            "host": "api.openai.com",
            "port": 443,
            "path": "/v1/chat/completions",
            "query": "",
            "http_version": "HTTP/1.1",
            "request_headers": [["content-type", "application/json"], ["authorization", "***"]],
            "request_body": b'{"model":"gpt-4o-mini","stream":true}',
            "fingerprint": "ab" * 32,
            "is_stream": True,
            "recorder": "host:1:0",
        }
        fields.update(overrides)
        return fields

    return make


@pytest.fixture
def event_rows() -> Callable[..., list[EventRow]]:
    """Event rows as the recording process hands them to Writer.add_events."""

    def make(start: int, n: int, *, tag: str = "") -> list[EventRow]:
        rows: list[EventRow] = []
        for seq in range(start, start + n):
            data = f'{{"tag":"{tag}","seq":{seq}}}'
            rows.append((seq, seq * 1000, "message", data, None, f"data: {data}\n\n".encode()))
        return rows

    return make
