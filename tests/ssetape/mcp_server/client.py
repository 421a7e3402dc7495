"""The official SDK's own client, on mcp 1 (Python 3.11) or mcp 2 (3.12+), against the server in
memory; answers read as the wire says them (camelCase JSON), so a test reads the same on both.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from importlib.metadata import version
from typing import Any

import anyio

from ssetape.mcp_server.server import build
from ssetape.storage.store import Store

MCP_MAJOR = int(version("mcp").split(".")[0])


@asynccontextmanager
async def connected(server: Any) -> AsyncIterator[Any]:
    """A client session with ``server``: mcp 1's ClientSession, mcp 2's Client."""
    if MCP_MAJOR >= 2:
        from mcp import Client

        async with Client(server) as client:
            yield client
    else:
        from mcp.shared.memory import create_connected_server_and_client_session

        async with create_connected_server_and_client_session(server) as session:
            yield session


def in_memory(store: Store, body: Callable[[Any], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with connected(build(store)) as client:
            return await body(client)

    return anyio.run(main)


def wire(model: Any) -> dict[str, Any]:
    """An SDK result as its JSON on the wire."""
    doc: dict[str, Any] = model.model_dump(mode="json", by_alias=True)
    return doc


async def answer(client: Any, name: str, **args: Any) -> dict[str, Any]:
    """The whole answer to a tool call: content, structuredContent, isError."""
    return wire(await client.call_tool(name, args))


async def call(client: Any, name: str, **args: Any) -> dict[str, Any]:
    """A tool's structured answer (the call must succeed)."""
    result = await answer(client, name, **args)
    assert not result.get("isError"), result["content"]
    structured: dict[str, Any] = result["structuredContent"]
    return structured


async def error(client: Any, name: str, **args: Any) -> str:
    """The text of a tool's error (the call must fail)."""
    result = await answer(client, name, **args)
    assert result.get("isError"), result
    text: str = result["content"][0]["text"]
    return text


async def tools(client: Any) -> dict[str, dict[str, Any]]:
    """The tools listed, by name, as the wire says them."""
    return {t.name: wire(t) for t in (await client.list_tools()).tools}
