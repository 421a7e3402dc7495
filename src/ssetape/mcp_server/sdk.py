"""The official MCP SDK, major version 1 or 2: what this package uses of it, spelled once.

mcp 2 is on httpx2, so Python 3.11 keeps mcp 1 (see pyproject.toml). mcp 2 renamed FastMCP
to ``MCPServer`` and its types' fields to snake case (their camelCase names stay aliases, as
on the wire); both run a tool the same way and turn a ``ToolError`` raised in it into an
``isError`` answer whose text is "Error executing tool NAME: message". Types are built here
from their wire spelling, so one call works on both.
"""

from __future__ import annotations

import logging
from importlib.metadata import version
from typing import TYPE_CHECKING, Any, Literal

import orjson
import pydantic
from mcp.types import CallToolResult, ToolAnnotations

# mypy reads mcp 1 (Python 3.11, the oldest supported); at run time, whichever is installed.
if TYPE_CHECKING:
    from mcp.server.fastmcp import FastMCP as Server
    from mcp.server.fastmcp.exceptions import ToolError as SdkToolError
elif int(version("mcp").split(".")[0]) >= 2:
    from mcp.server.mcpserver import MCPServer as Server
    from mcp.server.mcpserver.exceptions import ToolError as SdkToolError
else:
    from mcp.server.fastmcp import FastMCP as Server
    from mcp.server.fastmcp.exceptions import ToolError as SdkToolError

__all__ = ["PAST", "READ_ONLY", "LogLevel", "SdkToolError", "Server", "answer", "new_server"]

# An argument no column holds (5,000 digits, 2**63): no row has it.
PAST = "an argument is a number past what the store holds (at most 2**63 - 1)"
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]

READ_ONLY = ToolAnnotations.model_validate(
    {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True,
     "openWorldHint": False}
)  # fmt: skip


class _OneLineErrors(Server):
    """The SDK's server, whose errors an agent reads in one line: a bad argument as the field
    and what it must be (not pydantic's paragraph with its link), and what fails before a
    tool runs (the SDK reads a string of 5,000 digits as a JSON number) without Python's
    internal text."""

    async def call_tool(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().call_tool(*args, **kwargs)
        except SdkToolError as e:
            name = args[0] if args else kwargs.get("name", "?")
            raise SdkToolError(f"Error executing tool {name}: {_said(e)}") from None


def _said(e: SdkToolError) -> str:
    cause = e.__cause__
    if isinstance(cause, SdkToolError):  # the tool's own: one line already
        return str(cause)
    if isinstance(cause, pydantic.ValidationError) and cause.errors():
        first = cause.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "arguments"
        return f"{field}: {first['msg']}"
    if isinstance(cause, ValueError | OverflowError):
        return PAST
    lines = str(e).partition(": ")[2].strip().splitlines() or ["failed"]
    return lines[0][:300]


def new_server(name: str, instructions: str, log_level: LogLevel) -> Server:
    """A server whose own log says no more than ``log_level`` (both SDKs log a line per
    request at INFO, to stderr)."""
    server = _OneLineErrors(name, instructions=instructions, log_level=log_level)
    logging.getLogger("mcp").setLevel(log_level)
    return server


def answer(doc: dict[str, Any]) -> CallToolResult:
    """``doc`` as a tool's answer: structured, and as compact JSON text. (Left to the SDK,
    the text is indented, a quarter bigger, and that text is what most agents read.)"""
    text = orjson.dumps(doc).decode()
    return CallToolResult.model_validate(
        {"content": [{"type": "text", "text": text}], "structuredContent": doc}
    )
