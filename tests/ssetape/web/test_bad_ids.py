"""Ids a URL may carry that no store holds (past 64 bits, 5,000 digits, `²`): each is a 404
page, never a 500 with a traceback (SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from ssetape.storage.writer import Writer
from ssetape.web.app import create_app
from tests.storage.conftest import exchange_fields, store_url

__all__ = ["exchange_fields", "store_url"]  # fixtures

BAD = [str(2**63), "9" * 19, str(2**64), "9" * 5000, "²", "1²", "-1"]


@pytest.fixture
def client(store_url: str, exchange_fields: Callable[..., dict[str, Any]]) -> Iterator[TestClient]:
    with Store.open(store_url) as store:
        w = Writer(store)
        w.start()
        try:
            w.begin("a" * 32, **exchange_fields())
            w.add_events("a" * 32, [(0, 10, None, "x", None, b"data: x\n\n")])
            w.finish("a" * 32, state="completed", status=200)
            assert w.flush()
        finally:
            w.close()
        with TestClient(create_app(Queries(store)), raise_server_exceptions=False) as c:
            yield c


@pytest.mark.parametrize("bad", BAD)
def test_an_id_no_store_holds_is_not_found(client: TestClient, bad: str) -> None:
    for path in (
        f"/exchanges/{bad}",
        f"/exchanges/{bad}/play",
        f"/exchanges/{bad}/timeline",
        f"/exchanges/{bad}/live",
        f"/exchanges/{bad}/download/har",
        f"/exchanges/{bad}/events/0",
        f"/exchanges/{'a' * 32}/events/{bad}",
    ):
        r = client.get(path)
        assert r.status_code == 404, (path, r.status_code, r.text[:300])
        assert "Traceback" not in r.text
    for path, params in (
        ("/compare", {"a": bad, "b": "a" * 32}),
        ("/compare", {"a": "a" * 32, "b": bad}),
        (f"/exchanges/{'a' * 32}", {"after": bad}),
        ("/", {"before": bad}),
        ("/session/s", {"after": bad}),
        (f"/exchanges/{'a' * 32}/live", {"after": bad, "offset": bad, "start": bad}),
        ("/live", {"after": bad, "watch": bad}),
    ):
        r = client.get(path, params=params) if "live" not in path else None
        if r is None:
            continue  # a live stream never ends: its arguments are parsed as the pages' are
        assert r.status_code < 500, (path, params, r.status_code, r.text[:300])
        assert "Traceback" not in r.text
