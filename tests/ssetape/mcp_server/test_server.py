"""`ssetape mcp` driven through the official SDK's own client: in memory against the server
object, and as the real stdio subprocess an agent starts."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from ssetape.mcp_server.texts import TEXT
from ssetape.storage.store import Store
from tests.conftest import SSETAPE
from tests.ssetape.mcp_server.client import call, error, in_memory, tools
from tests.ssetape.mcp_server.conftest import INJECTION
from tests.ssetape.web.conftest import Tape

__all__ = ["call", "in_memory"]  # as other tests drive the server

TOOLS = {"list_exchanges", "get_exchange", "stats", "find_stalls", "findings", "compare",
         "sessions", "session"}  # fmt: skip


def test_the_tools_are_listed_read_only_and_warn_of_recorded_text(store: Store) -> None:
    listed = in_memory(store, tools)
    assert set(listed) == TOOLS
    for name, t in listed.items():
        assert t["annotations"]["readOnlyHint"] is True, name
        assert t["annotations"]["openWorldHint"] is False, name
        assert "never instructions" in t["description"], name
        assert t["outputSchema"], name


def test_each_tool_answers_from_the_recorded_store(store: Store) -> None:
    async def body(client: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        out["page1"] = await call(client, "list_exchanges", limit=2)
        out["page2"] = await call(client, "list_exchanges", limit=2,
                                  cursor=out["page1"]["next_cursor"])  # fmt: skip
        out["claude"] = await call(client, "list_exchanges", api="messages")
        xid = str(out["claude"]["exchanges"][0]["id"])
        out["one"] = await call(client, "get_exchange", id=xid, events=True, limit=3)
        after = out["one"]["events_next_after_seq"]
        out["more"] = await call(client, "get_exchange", id=xid, events=True, after_seq=after)
        out["stats"] = await call(client, "stats", group_by="model")
        out["stalls"] = await call(client, "find_stalls", min_gap_ms=100)
        out["findings"] = await call(client, "findings")
        a, b = (str(x["id"]) for x in out["page1"]["exchanges"])
        out["compare"] = await call(client, "compare", a=a, b=b)
        out["bad"] = await error(client, "stats", group_by="colour")
        return out

    out = in_memory(store, body)
    # Pages: newest first, one after the other, no exchange twice.
    ids = [x["id"] for x in out["page1"]["exchanges"] + out["page2"]["exchanges"]]
    assert len(ids) == 4 and len(set(ids)) == 4 and ids == sorted(ids, reverse=True)
    [claude] = out["claude"]["exchanges"]
    assert claude["model"] == "claude-sim" and claude["usage"]["output_tokens"]

    one = out["one"]
    assert one["exchange"]["id"] == claude["id"] and one["response"]["status"] == 200
    assert b"hi" in one["request"]["body"]["text"].encode()
    assert one["analysis"]["output_text"]["text"]
    assert [e["seq"] for e in one["events"]] == [0, 1, 2]
    assert out["more"]["events"][0]["seq"] == 3

    by_model = {g["group"]: g for g in out["stats"]["groups"]}
    assert set(by_model) >= {"gpt-4o-sim", "claude-sim", "gpt-4o-evil"}
    assert by_model["gpt-4o-sim-error"]["failed"] == 1
    assert by_model["gpt-4o-sim"]["ttft_ms"]["p50"] > 0

    # The simulator's pause is the stall found; the events on both sides come with it.
    stalled = [s for s in out["stalls"]["stalls"] if s["exchange"]["model"] == "gpt-4o-sim-pause"]
    assert stalled and stalled[0]["pauses"], out["stalls"]
    pause = stalled[0]["pauses"][0]
    assert pause["gap_ms"] >= 100 and pause["events_before"] and pause["events_after"]
    assert pause["events_before"][-1]["seq"] == pause["between_seqs"][0]
    assert pause["events_after"][0]["seq"] == pause["between_seqs"][1]

    assert all(f["code"] and f["exchange_id"] for f in out["findings"]["findings"])
    timing = out["compare"]["timing"]
    assert timing["a"]["ttfb_ms"] is not None and timing["b"]["ttfb_ms"] is not None
    assert any(d["what"] == "model" for d in out["compare"]["request_diff"])
    assert "group_by" in out["bad"]


def test_an_injected_stream_comes_back_as_cut_data(store: Store) -> None:
    async def body(client: Any) -> dict[str, Any]:
        [x] = (await call(client, "list_exchanges", model="gpt-4o-evil"))["exchanges"]
        return await call(client, "get_exchange", id=str(x["id"]), events=True)

    doc = in_memory(store, body)
    output = doc["analysis"]["output_text"]
    assert output == {"text": INJECTION[:TEXT], "truncated": True, "size": len(INJECTION)}
    [data] = [e["data"] for e in doc["events"] if INJECTION[:40] in (e["data"] or {})["text"]]
    assert data["truncated"] and data["size"] > len(INJECTION) > len(data["text"])


def _over_stdio(tape: Tape, *args: str) -> tuple[set[str], dict[str, Any], str]:
    """Every tool, as an agent calls it through the real pipe; and what the server said on
    stderr meanwhile. From a folder of its own: nothing may depend on ./ssetape.db."""
    params = StdioServerParameters(command=SSETAPE, args=["mcp", "--db", tape.db, *args],
                                   env={**os.environ}, cwd=str(tape.confdir))  # fmt: skip

    async def main(log: Any) -> tuple[set[str], dict[str, Any]]:
        with anyio.fail_after(60):
            async with (
                stdio_client(params, errlog=log) as (read, write),
                ClientSession(read, write) as client,
            ):
                await client.initialize()
                names = set(await tools(client))
                out: dict[str, Any] = {"stats": await call(client, "stats")}
                listed = await call(client, "list_exchanges", limit=2)
                a, b = (x["id"] for x in listed["exchanges"])
                out["get"] = await call(client, "get_exchange", id=a, events=True, limit=2)
                out["compare"] = await call(client, "compare", a=a, b=b)
                out["stalls"] = await call(client, "find_stalls", min_gap_ms=100)
                out["findings"] = await call(client, "findings")
                out["sessions"] = await call(client, "sessions")
                out["session"] = await error(client, "session", id="no such session")
                return names, out

    with tempfile.TemporaryFile("w+") as log:
        names, out = anyio.run(main, log)
        log.seek(0)
        return names, out, log.read()


def test_over_stdio_as_an_agent_starts_it(tape: Tape) -> None:
    names, out, log = _over_stdio(tape)
    assert names == TOOLS
    [everything] = out["stats"]["groups"]
    assert everything["count"] == len(tape.exchanges())
    assert out["get"]["exchange"]["id"] and len(out["get"]["events"]) == 2
    assert out["compare"]["timing"]["a"] and out["stalls"]["stalls"]
    assert out["findings"]["findings"] and out["sessions"]["sessions"] == []
    assert out["session"].endswith("no session 'no such session' in this store")
    # An agent's client shows the server's stderr: by default, nothing per call.
    assert "Processing request" not in log and "INFO" not in log, log


def test_verbose_logs_each_request(tape: Tape) -> None:
    _names, _out, log = _over_stdio(tape, "--verbose")
    assert "INFO" in log, log


def test_a_missing_store_is_a_one_line_error(tmp_path: Path) -> None:
    out = subprocess.run([SSETAPE, "mcp", "--db", str(tmp_path / "none.db")], capture_output=True,
                         text=True, timeout=60, cwd=tmp_path, stdin=subprocess.DEVNULL)  # fmt: skip
    assert out.returncode != 0 and out.stderr.startswith("Error:"), out.stderr
    assert out.stdout == ""
