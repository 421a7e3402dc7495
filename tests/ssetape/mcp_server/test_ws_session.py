"""`get_exchange` of a recorded WebSocket session through the SDK's own client: its frames per
lane and its turns (each with TTFT, duration, longest gap, usage and outcome), bounded by
max_bytes; its events say who sent them; `find_stalls` finds pauses within turns only. On
SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from ssetape.mcp_server.paging import MAX_PAGE_BYTES, MIN_PAGE_BYTES
from ssetape.simulator.ws_realtime import DELTAS, USAGE
from ssetape.simulator.ws_wire import DELAY
from ssetape.storage.store import Store
from tests.addons.stores import pg_base, pg_schema
from tests.ssetape.mcp_server.client import call, in_memory
from tests.ssetape.views.ws_sessions import THINK, Recorded, record_sessions, recorded, within_ms


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def sessions(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Recorded, Store]]:
    if request.param == "sqlite":
        tape = recorded(tmp_path_factory)
        with Store.open(tape.db, create=False) as store:
            yield tape, store
        return
    pg_base()
    with pg_schema() as url:
        tape = record_sessions(tmp_path_factory.mktemp("mcp-ws"), url)
        with Store.open(url) as store:
            yield tape, store


def get(store: Store, **args: Any) -> dict[str, Any]:
    async def body(client: Any) -> dict[str, Any]:
        return await call(client, "get_exchange", **args)

    result: dict[str, Any] = in_memory(store, body)
    return result


def test_a_session_has_its_lanes_and_turns(sessions: tuple[Recorded, Store]) -> None:
    tape, store = sessions
    doc = get(store, id=tape.ids["two"])
    fake = tape.sent["two"]
    assert doc["frames"]["client"]["frames"] == len(fake.received) == 2
    assert doc["frames"]["server"]["frames"] == len(fake.sent)
    assert doc["turns_total"] == 2 and "turns_note" not in doc
    first, second = doc["turns"]
    for turn in (first, second):
        assert turn["outcome"] == "completed"
        assert within_ms(turn["ttft_ms"], DELAY) and within_ms(turn["gap_max_ms"], DELAY)
        assert turn["usage"]["output_tokens"] == USAGE["output_tokens"]
    assert second["start_ms"] - first["start_ms"] > THINK * 1000
    # The turns' TTFTs are those the stored analysis counted.
    assert doc["exchange"]["ttft_ms"] == first["ttft_ms"]


def test_a_server_error_turn(sessions: tuple[Recorded, Store]) -> None:
    tape, store = sessions
    [turn] = get(store, id=tape.ids["error"])["turns"]
    assert (turn["outcome"], turn["reason"]) == ("error", "server_error")


def test_turns_fit_max_bytes_and_events_say_who_sent_them(
    sessions: tuple[Recorded, Store],
) -> None:
    tape, store = sessions
    doc = get(store, id=tape.ids["two"], events=True, max_bytes=MIN_PAGE_BYTES)
    assert len(orjson.dumps(doc["turns"])) <= MIN_PAGE_BYTES
    assert doc["turns_total"] == 2
    if len(doc["turns"]) < 2:  # what did not fit is said, with how to see it
        assert "max_bytes" in doc["turns_note"]
    senders = {e["seq"]: e["direction"] for e in doc["events"]}
    assert senders[1] == "client" and senders[0] == "server"


def test_stalls_are_found_within_turns(sessions: tuple[Recorded, Store]) -> None:
    """The deltas' pauses are found; the user's silence between two turns is none."""
    tape, store = sessions

    async def body(client: Any) -> dict[str, Any]:
        return await call(client, "find_stalls", min_gap_ms=DELAY * 1000 / 2, limit=20,
                          max_bytes=MAX_PAGE_BYTES)  # fmt: skip

    stalls = in_memory(store, body)["stalls"]
    [two] = [s for s in stalls if s["exchange"]["id"] == tape.ids["two"]]
    assert two["pauses_found"] == 2 * (len(DELTAS) - 1)
    assert all(p["gap_ms"] < THINK * 1000 for p in two["pauses"])
