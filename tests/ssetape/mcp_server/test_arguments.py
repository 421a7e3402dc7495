"""What the tools take: an id as any tool gave it, and an outcome from the vocabulary (listed
in the schema; anything else an error naming the choices, never an empty answer)."""

from __future__ import annotations

from typing import Any

from ssetape.storage.store import Store
from ssetape.vocabulary import Outcome
from tests.ssetape.mcp_server.client import call, error, in_memory, tools
from tests.ssetape.web.conftest import Tape


def test_an_id_any_tool_gives_is_taken_as_is_by_every_tool(tape: Tape, store: Store) -> None:
    async def body(client: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        listed = (await call(client, "list_exchanges", limit=100))["exchanges"]
        found = (await call(client, "findings"))["findings"]
        stalled = (await call(client, "find_stalls", min_gap_ms=100))["stalls"]
        given = [x["id"] for x in listed] + [f["exchange_id"] for f in found]
        given += [s["exchange"]["id"] for s in stalled]
        out["given"] = given
        # As given (numbers), as strings (what the tools took before), and by uid.
        out["by_id"] = [(await call(client, "get_exchange", id=i))["exchange"] for i in given]
        out["by_str"] = [(await call(client, "get_exchange", id=str(i)))["exchange"]["id"]
                         for i in given]  # fmt: skip
        out["by_uid"] = [(await call(client, "get_exchange", id=x["uid"]))["exchange"]["id"]
                         for x in listed]  # fmt: skip
        a, b = listed[0], listed[1]
        out["compare"] = [await call(client, "compare", a=a["id"], b=b["id"]),
                          await call(client, "compare", a=str(a["id"]), b=b["uid"])]  # fmt: skip
        out["missing"] = [await error(client, "get_exchange", id=10**30),
                          await error(client, "get_exchange", id=0),
                          await error(client, "compare", a=a["id"], b="no-such-uid")]  # fmt: skip
        return out

    out = in_memory(store, body)
    ids = {x.id: x for x in tape.exchanges()}
    assert all(isinstance(i, int) for i in out["given"]) and len(out["given"]) > len(ids)
    assert [x["id"] for x in out["by_id"]] == out["given"] == out["by_str"]
    assert all(x["uid"] == ids[x["id"]].uid for x in out["by_id"])
    assert sorted(out["by_uid"]) == sorted(ids)
    by_number, by_string_and_uid = out["compare"]
    a_id, b_id = out["given"][:2]
    assert by_number == by_string_and_uid
    assert by_number["timing"]["a"]["id"] == a_id and by_number["timing"]["b"]["id"] == b_id
    assert all("no exchange" in e for e in out["missing"]), out["missing"]


def test_outcomes_are_listed_and_an_unknown_one_is_an_error(tape: Tape, store: Store) -> None:
    async def body(client: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"tools": await tools(client)}
        out["completed"] = await call(client, "list_exchanges", outcome="completed", limit=100)
        out["errors"] = await error(client, "list_exchanges", outcome="errors")
        out["upper"] = await error(client, "list_exchanges", outcome="COMPLETED")
        return out

    out = in_memory(store, body)
    taking = {n: t["inputSchema"]["properties"]["outcome"] for n, t in out["tools"].items()
              if "outcome" in t["inputSchema"]["properties"]}  # fmt: skip
    assert set(taking) == {"list_exchanges"}
    for name, schema in taking.items():
        [choices] = [s["enum"] for s in schema["anyOf"] if "enum" in s]
        assert set(choices) >= {o.value for o in Outcome}, name
    completed = sorted(x.id for x in tape.exchanges() if x.outcome == Outcome.COMPLETED)
    assert completed and sorted(x["id"] for x in out["completed"]["exchanges"]) == completed
    for said in (out["errors"], out["upper"]):
        assert all(o.value in said for o in Outcome), said
