"""`ssetape mcp` writes nothing to the store it serves: an exchange a dead recorder left
`recording` stays so (marking it is for recorders and the commands that write), while
`ssetape list` still marks it, as documented (SQLite and PostgreSQL)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from ssetape.storage.writer import Writer
from tests.conftest import SSETAPE
from tests.ssetape.mcp_server.client import call
from tests.storage.conftest import exchange_fields, store_url
from tests.storage.test_runs import HOST, dead_pid

__all__ = ["exchange_fields", "store_url"]  # fixtures


def _over_stdio(db: str, cwd: Path) -> dict[str, Any]:
    params = StdioServerParameters(
        command=SSETAPE, args=["mcp", "--db", db], env={**os.environ}, cwd=str(cwd)
    )

    async def main() -> dict[str, Any]:
        with anyio.fail_after(60):
            async with (
                stdio_client(params) as (read, write),
                ClientSession(read, write) as client,
            ):
                await client.initialize()
                listed = await call(client, "list_exchanges")
                [x] = listed["exchanges"]
                return await call(client, "get_exchange", id=x["id"])

    result: dict[str, Any] = anyio.run(main)
    return result


def test_mcp_leaves_a_dead_recorders_exchange_as_it_found_it(
    store_url: str, tmp_path: Path, exchange_fields: Callable[..., dict[str, Any]]
) -> None:
    dead = f"{HOST}:{dead_pid()}:{int(time.time())}"
    with Store.open(store_url) as store:
        w = Writer(store)
        w.start()
        try:
            w.begin("d" * 32, **exchange_fields(recorder=dead))
            assert w.flush()
        finally:
            w.close()

    def state() -> str:
        with Store.open(store_url, create=False) as store:
            x = Queries(store).exchange("d" * 32)
            assert x is not None
            return x.state

    assert state() == "recording"
    got = _over_stdio(store_url, tmp_path)
    assert got["exchange"]["state"] == "recording"
    assert state() == "recording"
    listed = subprocess.run(
        [SSETAPE, "list", "--db", store_url], capture_output=True, text=True, timeout=60
    )
    assert listed.returncode == 0, listed.stderr
    assert state() == "interrupted"
