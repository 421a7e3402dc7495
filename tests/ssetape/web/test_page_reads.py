"""What the viewer reads of a store whose exchanges hold big bodies: the list and its live feed
read no body at all, and an exchange's page reads its bodies cut, showing their sizes (the
SQL the viewer sends is captured from its engine; SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import datetime as dt
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import orjson
from sqlalchemy import event

from ssetape.storage.models import Exchange
from ssetape.storage.store import Store
from ssetape.vocabulary import ExchangeState
from ssetape.web.exchange_page import BODY_SHOWN
from ssetape.web.server import WebServer
from tests.storage.conftest import store_url

__all__ = ["store_url"]  # fixtures

MIB = 1024 * 1024
# A body column named (not response_body_bytes, its whole size when stored cut).
BODY = re.compile(r"\b(request|response)_body\b")


def add_exchange(store: Store, n: int, **fields: Any) -> int:
    """One exchange written as a recorder leaves it; its id."""
    values: dict[str, Any] = {
        "uid": f"{n:032x}",
        "started_at": dt.datetime(2026, 3, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=n),
        "method": "POST", "scheme": "https", "host": "api.example.com", "port": 443,
        "path": "/v1/chat/completions", "http_version": "HTTP/1.1",
        "request_headers": [["content-type", "application/json"]], "fingerprint": "ab" * 32,
        "status": 200, "response_headers": [["content-type", "application/json"]],
        "state": ExchangeState.COMPLETED, "outcome": "completed", "model": f"model-{n}",
    }  # fmt: skip
    values.update(fields)
    with store.Session() as s:
        x = Exchange(**values)
        s.add(x)
        s.commit()
        return x.id


@contextmanager
def serving(store: Store, **options: Any) -> Iterator[str]:
    """The viewer of ``store`` on a free loopback port, in this process (so its SQL can be
    watched); its URL."""
    server = WebServer(store, "127.0.0.1", 0, **options)
    ready = threading.Event()
    thread = threading.Thread(
        target=lambda: asyncio.run(server.serve(lambda _: ready.set(), signals=False))
    )
    thread.start()
    try:
        assert ready.wait(10)
        yield server.url
    finally:
        server.stop()
        thread.join(10)


@contextmanager
def statements(store: Store) -> Iterator[list[str]]:
    """Every SQL statement sent to ``store`` meanwhile."""
    seen: list[str] = []

    def capture(conn: Any, cursor: Any, sql: str, *args: Any) -> None:
        seen.append(sql)

    event.listen(store.engine, "before_cursor_execute", capture)
    try:
        yield seen
    finally:
        event.remove(store.engine, "before_cursor_execute", capture)


def _live_rows(url: str, want: set[int]) -> dict[int, str]:
    """The rows the live feed sends until it has sent those of ``want``."""
    rows: dict[int, str] = {}
    with httpx.stream("GET", url, timeout=20) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: "):
                row = orjson.loads(line[6:])
                rows[row["id"]] = row["html"]
            if want <= rows.keys():
                return rows
    raise AssertionError(f"the feed ended with {sorted(rows)}")


def test_the_list_and_its_live_feed_read_no_body(store_url: str) -> None:
    big = b'{"input": "' + b"x" * (2 * MIB) + b'"}'
    with Store.open(store_url) as store:
        done = add_exchange(store, 1, request_body=big, response_body=big, duration_us=9000)
        live = add_exchange(store, 2, request_body=big, state=ExchangeState.RECORDING, outcome=None)
        small = add_exchange(store, 3, request_body=b"{}", response_body=b"{}", duration_us=10)
        with serving(store) as url, statements(store) as sql:
            # Newest first, and slowest first (those with a duration, then those without).
            for order in ("", "?sort=-duration"):
                page = httpx.get(url + "/" + order, timeout=20)
                assert page.status_code == 200
                for x_id in (done, live, small):
                    assert f'data-id="{x_id}"' in page.text
            # The feed from the start: every row, the one in flight followed.
            rows = _live_rows(url + "/live?after=0", {done, live, small})
            assert 'data-state="recording"' in rows[live] and "model-1" in rows[done]
        assert any("FROM exchanges" in s for s in sql)
        assert not [s for s in sql if BODY.search(s)]


def test_an_exchange_page_shows_a_100_mib_body_cut_with_its_size_and_reads_only_the_cut(
    store_url: str,
) -> None:
    body = bytes(range(33, 127)) * (100 * MIB // 94 + 1)
    body = body[: 100 * MIB]
    with Store.open(store_url) as store:
        x_id = add_exchange(store, 1, request_body=b'{"model": "m"}', response_body=body)
        del body
        with serving(store) as url, statements(store) as sql:
            page = httpx.get(f"{url}/exchanges/{x_id}", timeout=60)
        assert page.status_code == 200
        text = page.text
        assert "response body (104,857,600 bytes)" in text
        assert f"… ({100 * MIB - BODY_SHOWN:,} more bytes)" in text
        # Its first bytes, escaped; a small body whole (pretty-printed JSON).
        assert '<pre class="json">!&quot;#$%&amp;' in text
        assert "request body (14 bytes)" in text and "&quot;model&quot;: &quot;m&quot;" in text
        # No statement names a body but to cut it or to measure it.
        named = [s for s in sql if BODY.search(s)]
        assert named
        for s in named:
            rest = re.sub(r"(substr|length)\(exchanges\.(request|response)_body\b", "", s)
            assert not BODY.search(rest), s
