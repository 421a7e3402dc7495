"""The `sessions` and `session` tools, and `stats` with `until`, through the SDK's own client,
on a recording with two sessions and a call of none, on SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest

from ssetape.mcp_server.paging import MIN_PAGE_BYTES
from ssetape.storage.models import Exchange
from ssetape.storage.store import Store
from tests.addons.stores import pg_base, pg_schema
from tests.ssetape.mcp_server.client import call, error, in_memory
from tests.ssetape.web.conftest import XSS, Tape
from tests.ssetape.web.test_session_page import HOSTILE, RUN, RUN_MODELS, record_sessions


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def sessions_store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Tape, Store]]:
    folder = tmp_path_factory.mktemp("mcp-sessions")
    if request.param == "sqlite":
        tape = record_sessions(str(folder / "tape.db"), folder / "confdir")
        store = Store.open(tape.db)
        try:
            yield tape, store
        finally:
            store.close()
        return
    pg_base()
    with pg_schema() as url:
        tape = record_sessions(url, folder / "confdir")
        store = Store.open(url)
        try:
            yield tape, store
        finally:
            store.close()


def _us(d: dt.timedelta) -> int:
    return d // dt.timedelta(microseconds=1)


def _ms(us: int) -> float:
    return round(us / 1000, 3)


def test_sessions_are_listed_newest_first_with_totals_that_add_up(
    sessions_store: tuple[Tape, Store],
) -> None:
    tape, store = sessions_store
    everything = tape.exchanges()

    async def body(client: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        out["all"] = await call(client, "sessions")
        out["page1"] = await call(client, "sessions", limit=1)
        out["page2"] = await call(client, "sessions", limit=1,
                                  cursor=out["page1"]["next_cursor"])  # fmt: skip
        first_hostile = min(x.started_at for x in everything if x.session == HOSTILE)
        out["before"] = await call(client, "sessions", until=first_hostile.isoformat())
        out["future"] = await call(client, "sessions", since="2999-01-01")
        out["bad"] = await error(client, "sessions", cursor="not a cursor")
        return out

    out = in_memory(store, body)
    # The call of no session is in none; the hostile session recorded last comes first.
    names = [s["session"] for s in out["all"]["sessions"]]
    assert names == [HOSTILE, RUN] and out["all"]["next_cursor"] is None
    paged = out["page1"]["sessions"] + out["page2"]["sessions"]
    assert [s["session"] for s in paged] == names
    assert out["page2"]["next_cursor"] is not None  # a full page: there may be more
    for doc in out["all"]["sessions"]:
        calls = [x for x in everything if x.session == doc["session"]]
        _check_totals(doc, calls)
    [run] = [s for s in out["all"]["sessions"] if s["session"] == RUN]
    assert run["failed"] == 1 and run["calls"] == 3
    # until: the calls started before HOSTILE's first, i.e. RUN's only.
    assert [s["session"] for s in out["before"]["sessions"]] == [RUN]
    assert out["future"]["sessions"] == []
    assert "cursor" in out["bad"]


def _check_totals(doc: dict[str, Any], calls: list[Exchange]) -> None:
    """The totals are the sums over the calls, as the store holds them."""
    first = min(x.started_at for x in calls)
    end = max(x.started_at + dt.timedelta(microseconds=x.duration_us or 0) for x in calls)
    assert doc["calls"] == len(calls)
    assert doc["input_tokens"] == sum(x.input_tokens or 0 for x in calls) > 0
    assert doc["output_tokens"] == sum(x.output_tokens or 0 for x in calls) > 0
    assert doc["ttft_total_ms"] == _ms(sum(x.ttft_us or 0 for x in calls))
    assert doc["wall_ms"] == _ms(_us(end - first))
    assert doc["first_start"] == first.isoformat()
    assert doc["last_start"] == max(x.started_at for x in calls).isoformat()
    # Cost: the exact sum over the priced calls, and how many have no price (claude-sim is no
    # model genai-prices knows): never a 0 standing for "unknown".
    priced = [x.cost_nusd for x in calls if x.cost_nusd is not None]
    assert doc["cost_nusd"] == (sum(priced) if priced else None)
    assert doc["unpriced"] == len(calls) - len(priced) and doc["priced"] == len(priced)
    assert doc["cost_usd"] == (None if not priced else sum(priced) / 10**9)


def test_a_session_gives_its_calls_in_start_order_on_its_time_axis(
    sessions_store: tuple[Tape, Store],
) -> None:
    tape, store = sessions_store
    calls = sorted((x for x in tape.exchanges() if x.session == RUN),
                   key=lambda x: (x.started_at, x.id))  # fmt: skip

    async def body(client: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        out["whole"] = await call(client, "session", id=RUN)
        out["page1"] = await call(client, "session", id=RUN, limit=2)
        out["page2"] = await call(client, "session", id=RUN, limit=2,
                                  cursor=out["page1"]["next_cursor"])  # fmt: skip
        out["hostile"] = await call(client, "session", id=HOSTILE)
        out["missing"] = await error(client, "session", id="no such session")
        # Bounded by bytes too; and each call's id, as given, names its exchange.
        small = [await call(client, "session", id=RUN, max_bytes=MIN_PAGE_BYTES)]
        while small[-1]["next_cursor"] is not None:
            small.append(await call(client, "session", id=RUN, max_bytes=MIN_PAGE_BYTES,
                                    cursor=small[-1]["next_cursor"]))  # fmt: skip
        out["small"] = small
        out["got"] = [(await call(client, "get_exchange", id=c["id"]))["exchange"]["id"]
                      for c in out["whole"]["calls"]]  # fmt: skip
        return out

    out = in_memory(store, body)
    whole = out["whole"]
    assert [c["id"] for c in whole["calls"]] == [x.id for x in calls]
    assert [c["model"] for c in whole["calls"]] == RUN_MODELS
    first = calls[0].started_at
    for doc, x in zip(whole["calls"], calls, strict=True):
        assert doc["offset_ms"] == _ms(_us(x.started_at - first))
        assert doc["ttfb_ms"] == _ms(x.ttfb_us or 0) and doc["ttft_ms"] == _ms(x.ttft_us or 0)
        assert doc["duration_ms"] == _ms(x.duration_us or 0)
        assert doc["outcome"] == x.outcome
        assert doc["input_tokens"] == x.input_tokens
        assert doc["cost_usd"] == (None if x.cost_nusd is None else x.cost_nusd / 10**9)
    assert [c["failed"] for c in whole["calls"]] == [False, True, False]
    _check_totals(whole["totals"], calls)
    assert whole["totals"]["failed"] == sum(c["failed"] for c in whole["calls"])
    assert whole["next_cursor"] is None
    # Pages: in order, none twice, the totals the whole session's on each.
    paged = [c["id"] for c in out["page1"]["calls"] + out["page2"]["calls"]]
    assert paged == [x.id for x in calls] and out["page2"]["next_cursor"] is None
    assert out["page2"]["totals"] == whole["totals"]
    # A recorded name comes back as data, as it was recorded.
    assert out["hostile"]["totals"]["session"] == HOSTILE and XSS in HOSTILE
    assert len(out["hostile"]["calls"]) == 2
    assert "no session" in out["missing"]
    small = out["small"]
    assert [c["id"] for p in small for c in p["calls"]] == [x.id for x in calls]
    assert all(p["page_bytes"] <= MIN_PAGE_BYTES for p in small)
    assert out["got"] == [x.id for x in calls]


def test_stats_takes_until(sessions_store: tuple[Tape, Store]) -> None:
    tape, store = sessions_store
    everything = sorted(tape.exchanges(), key=lambda x: x.started_at)
    cut = everything[2].started_at

    async def body(client: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        out["until"] = await call(client, "stats", until=cut.isoformat())
        out["since"] = await call(client, "stats", since=cut.isoformat())
        out["window"] = await call(client, "stats", group_by="session",
                                   since=everything[0].started_at.isoformat(),
                                   until=cut.isoformat())  # fmt: skip
        out["bad"] = await error(client, "stats", until="tomorrowish")
        return out

    out = in_memory(store, body)
    [before] = out["until"]["groups"]
    [after] = out["since"]["groups"]
    assert before["count"] == 2 and before["count"] + after["count"] == len(everything)
    assert [g["group"] for g in out["window"]["groups"]] == [RUN]
    assert "until" in out["bad"] and "since" not in out["bad"]
