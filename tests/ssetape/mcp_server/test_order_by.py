"""`list_exchanges(order_by="-duration")`: the slowest first, page after page by next_cursor,
those without a duration last; the timing ranges (min_ttft_ms, ...); an order not listed in
the schema's enum, or a cursor of another order, is an error naming what it takes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ssetape.storage.sorted_pages import SORTS
from ssetape.storage.store import Store
from tests.addons.stores import pg_schema
from tests.ssetape.mcp_server.client import call, error, in_memory, tools
from tests.storage.test_sorted_pages import KEYS, expected, fill


@pytest.fixture(params=["sqlite", "postgresql"])
def timed(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Store, dict[int, Any]]]:
    """A store of the exchanges of known timings, and their values by id."""

    def opened(url: str) -> Iterator[tuple[Store, dict[int, Any]]]:
        store = Store.open(url)
        try:
            yield store, fill(store)
        finally:
            store.close()

    if request.param == "sqlite":
        yield from opened(str(tmp_path / "store.db"))
        return
    with pg_schema() as url:
        yield from opened(url)


async def _pages(client: Any, limit: int, **args: Any) -> list[list[int]]:
    pages = [await call(client, "list_exchanges", limit=limit, **args)]
    while (cursor := pages[-1]["next_cursor"]) is not None:
        pages.append(await call(client, "list_exchanges", limit=limit, cursor=cursor, **args))
    return [[x["id"] for x in p["exchanges"]] for p in pages]


def test_order_by_duration_pages_the_slowest_first(timed: tuple[Store, dict[int, Any]]) -> None:
    store, values = timed

    async def body(client: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"tools": await tools(client)}
        out["slowest"] = await _pages(client, 3, order_by="-duration")
        out["every"] = {s: await _pages(client, 4, order_by=s) for s in SORTS}
        out["default"] = await _pages(client, 4)
        return out

    out = in_memory(store, body)
    ids = [i for p in out["slowest"] for i in p]
    assert ids == expected(values, "-duration")  # each once, those without a duration last
    assert [values[i]["duration"] for i in ids[:3]] == [8_000_000, 5_000_000, 5_000_000]
    assert [len(p) for p in out["slowest"]] == [3, 3, 3, 1]
    for sort, pages in out["every"].items():
        assert [i for p in pages for i in p] == expected(values, sort), sort
    assert [i for p in out["default"] for i in p] == expected(values, "-started")
    schema = out["tools"]["list_exchanges"]["inputSchema"]["properties"]
    assert schema["order_by"]["enum"] == list(SORTS)
    assert {f"{end}_{key}_ms" for key in KEYS[:4] for end in ("min", "max")} <= set(schema)


def test_timing_ranges_pick_exactly_those_in_range(timed: tuple[Store, dict[int, Any]]) -> None:
    store, values = timed

    async def body(client: Any) -> dict[str, Any]:
        return {
            "ttft": await _pages(client, 50, min_ttft_ms=2000),
            "duration": await _pages(client, 50, min_duration_ms=1500, max_duration_ms=5000),
            "gap": await _pages(client, 2, order_by="-gap", min_gap_ms=400),
        }

    out = in_memory(store, body)

    def within(key: str, low: float, high: float = float("inf")) -> list[int]:
        return sorted(i for i, v in values.items() if v[key] is not None and low <= v[key] <= high)

    assert sorted(out["ttft"][0]) == within("ttft", 2e6) != []
    assert sorted(out["duration"][0]) == within("duration", 1.5e6, 5e6) != []
    gaps = within("gap", 4e5)
    assert [i for p in out["gap"] for i in p] == [i for i in expected(values, "-gap") if i in gaps]


def test_an_unknown_order_or_a_cursor_of_another_is_one_line_naming_it(
    timed: tuple[Store, dict[int, Any]],
) -> None:
    store, _ = timed

    async def body(client: Any) -> dict[str, Any]:
        first = await call(client, "list_exchanges", order_by="-ttft", limit=1)
        return {
            "unknown": await error(client, "list_exchanges", order_by="slowest"),
            "other": await error(
                client, "list_exchanges", order_by="-duration", cursor=first["next_cursor"]
            ),
            "range": await error(client, "list_exchanges", min_ttft_ms=-1),
        }

    out = in_memory(store, body)
    [line] = out["unknown"].splitlines()
    assert "order_by 'slowest'" in line and all(key in line for key in KEYS)
    assert "not one a page sorted by -duration" in out["other"]
    assert "min_ttft_ms" in out["range"]
