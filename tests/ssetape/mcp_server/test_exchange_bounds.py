"""`get_exchange` answers in bounded size whatever the exchange holds: each list in it
(headers, tool calls, findings) holds what fits max_bytes, with its total and how to see the
rest; bodies and texts are read cut by the store."""

from __future__ import annotations

import datetime as dt
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import orjson
import pytest
from sqlalchemy import Table, insert

from bench.bench_tool_calls import tool_call_stream
from ssetape.analysis.tool_calls import MAX_TOOL_CALLS
from ssetape.mcp_server.paging import MAX_PAGE_BYTES, PAGE_BYTES
from ssetape.mcp_server.texts import TEXT
from ssetape.storage.models import Exchange
from ssetape.storage.store import Store
from tests.ssetape.mcp_server.client import answer, call, in_memory

CALLS = 5_000
ANSWER_MAX = 64_000


@pytest.fixture(scope="module")
def calls_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Store, int]]:
    db = tmp_path_factory.mktemp("calls") / "calls.db"
    with Store.open(str(db)) as store:
        yield store, tool_call_stream(store, CALLS)


def test_a_stream_of_thousands_of_tool_calls_answers_in_bounded_size(
    calls_db: tuple[Store, int],
) -> None:
    store, xid = calls_db

    async def body(client: Any) -> list[dict[str, Any]]:
        return [await answer(client, "get_exchange", id=xid),
                await answer(client, "get_exchange", id=xid, max_bytes=MAX_PAGE_BYTES)]  # fmt: skip

    small, large = in_memory(store, body)
    [content] = small["content"]
    assert len(content["text"].encode()) < ANSWER_MAX
    assert len(orjson.dumps(small["structuredContent"])) < ANSWER_MAX
    a, b = small["structuredContent"]["analysis"], large["structuredContent"]["analysis"]
    assert len(orjson.dumps(a["tool_calls"])) <= PAGE_BYTES
    # The first calls, in order; how many there were; how to see more.
    assert [c["id"] for c in a["tool_calls"]] == [f"call_{i}" for i in range(len(a["tool_calls"]))]
    assert a["tool_calls_total"] == b["tool_calls_total"] == CALLS
    assert "max_bytes" in a["tool_calls_note"] and "events=true" in a["tool_calls_note"]
    assert len(a["tool_calls"]) < len(b["tool_calls"]) <= MAX_TOOL_CALLS


def _exchange(store: Store, **columns: Any) -> int:
    row = {
        "uid": secrets.token_hex(16), "started_at": dt.datetime.now(dt.UTC), "method": "POST",
        "scheme": "https", "host": "api.example.test", "port": 443, "path": "/v1/x",
        "http_version": "HTTP/1.1", "request_headers": [], "fingerprint": "f", "status": 200,
        "state": "completed", **columns,
    }  # fmt: skip
    table = cast(Table, Exchange.__table__)
    with store.engine.begin() as conn:
        return int(conn.execute(insert(table).returning(table.c.id), row).scalar_one())


def test_thousands_of_headers_answer_a_page_of_them_with_their_count(tmp_path: Path) -> None:
    headers = [[f"x-h{i}", f"value {i}"] for i in range(3_000)]
    with Store.open(str(tmp_path / "h.db")) as store:
        xid = _exchange(store, response_headers=headers, request_headers=headers[:2])
        doc = in_memory(store, lambda client: call(client, "get_exchange", id=xid))
    response, request = doc["response"], doc["request"]
    assert response["headers"] == headers[: len(response["headers"])]
    assert response["headers_total"] == 3_000 and "max_bytes" in response["headers_note"]
    assert len(orjson.dumps(response["headers"])) <= PAGE_BYTES
    assert request["headers"] == headers[:2] and request["headers_total"] == 2
    assert "headers_note" not in request
    assert len(orjson.dumps(doc)) < ANSWER_MAX


def test_a_huge_body_answers_its_first_characters_and_its_size(tmp_path: Path) -> None:
    body = b'{"data":"' + "é".encode() * (3 << 20) + b'"}'
    with Store.open(str(tmp_path / "b.db")) as store:
        xid = _exchange(store, response_body=body, output_text="ok " * 10_000)
        doc = in_memory(store, lambda client: call(client, "get_exchange", id=xid))
    shown = doc["response"]["body"]
    assert shown["size"] == len(body) and shown["truncated"] is True
    assert shown["text"].startswith('{"data":"éé') and len(shown["text"]) <= TEXT
    assert doc["analysis"]["output_text"] == {
        "text": ("ok " * 10_000)[:TEXT], "truncated": True, "size": 30_000
    }  # fmt: skip
    assert doc["request"]["body"] is None


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_the_store_reads_bodies_and_text_cut(backend: str, tmp_path: Path) -> None:
    from sqlalchemy.orm.exc import DetachedInstanceError

    from ssetape.storage.exchange_heads import ExchangeHeads
    from tests.addons.stores import pg_schema

    def check(url: str) -> None:
        with Store.open(url) as store:
            body = b"\xff\x00" + b"x" * (1 << 20)
            xid = _exchange(store, response_body=body, output_text="é" * 9)
            got = ExchangeHeads(store).exchange(str(xid), 4)
            assert got is not None and got.exchange.id == xid
            assert got.response_body == (b"\xff\x00xx", len(body))
            assert got.output_text == ("éééé", 9) and got.request_body is None
            with pytest.raises(DetachedInstanceError):  # read cut, never whole
                _ = got.exchange.response_body
            assert ExchangeHeads(store).exchange(got.exchange.uid, 4) is not None
            assert ExchangeHeads(store).exchange(2**64, 4) is None

    if backend == "sqlite":
        check(str(tmp_path / "cut.db"))
        return
    with pg_schema() as url:
        check(url)
