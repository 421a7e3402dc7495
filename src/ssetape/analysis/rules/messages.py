"""Rules of the Anthropic Messages API, streamed and whole.

``message_start``, content blocks (text, thinking, tool use) with their deltas,
``message_delta`` with the stop reason and cumulative usage, then ``message_stop``; ``ping``
keeps the connection alive and ``error`` ends a stream that failed after it started.
"""

from __future__ import annotations

from typing import Any

import orjson

from ssetape.analysis.api_rules import ApiRules
from ssetape.analysis.rules.payload import as_dict, as_str
from ssetape.analysis.tally import Tally
from ssetape.vocabulary import Outcome

__all__ = ["MESSAGES_EVENTS", "RULES"]

MESSAGES_EVENTS = frozenset(
    {
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
        "ping",
        "error",
    }
)
# stop_reason -> outcome; an unknown stop reason still ended the message normally.
_STOP = {
    "end_turn": Outcome.COMPLETED,
    "tool_use": Outcome.COMPLETED,
    "stop_sequence": Outcome.COMPLETED,
    # The server paused a long turn (server tools); the client sends it back to continue.
    "pause_turn": Outcome.INCOMPLETE,
    "max_tokens": Outcome.INCOMPLETE,
    "model_context_window_exceeded": Outcome.INCOMPLETE,
    "refusal": Outcome.REFUSED,
    # Paused after compacting the context (pause_after_compaction): the client resends.
    "compaction": Outcome.INCOMPLETE,
}
# delta type -> (field holding the value, where it goes); a signature or a citation is no
# content. A compaction summary is generated (so content, for TTFT) but neither the answer nor
# its reasoning. Which types a provider sends is its profile's ``messages_deltas``.
_DELTAS = {
    "text_delta": ("text", "text"),
    "thinking_delta": ("thinking", "reasoning"),
    "input_json_delta": ("partial_json", "tool"),
    "signature_delta": ("signature", ""),
    "citations_delta": ("citation", ""),
    "compaction_delta": ("content", "summary"),
}
# Blocks whose input the provider runs itself (server tools: web search, code execution,
# tool search, web fetch, the advisor; MCP connectors, and any later ``*_tool_use``): the model
# wrote it, but the client owes no answer. Their ``*_tool_result`` blocks, compaction and other
# block types carry nothing read here and pass without a finding.
_SERVER_USE = frozenset({"server_tool_use", "mcp_tool_use"})


def _block_key(ev: dict[str, Any]) -> tuple[str, int]:
    index = ev.get("index")
    return ("block", index if isinstance(index, int) else -1)


def event(tally: Tally, seq: int, kind: str | None, ev: dict[str, Any]) -> bool:
    if kind == "content_block_delta":
        delta = as_dict(ev.get("delta"))
        dtype = as_str(delta.get("type"))
        if dtype not in tally.profile.messages_deltas:  # each profile's are _DELTAS' keys
            tally.unknown(seq, f"content_block_delta {dtype or '(no type)'}")
            return False
        key, target = _DELTAS[dtype]
        value = as_str(delta.get(key))
        if not (value and target):
            return False
        if target == "text":
            tally.text.append(value)
        elif target == "reasoning":
            tally.reasoning.append(value)
        elif target == "summary":
            pass
        elif (block := _block_key(ev)) not in tally.server_blocks:
            tally.tool(block).parts.append(value)
        return True
    if kind == "message_start":
        message = as_dict(ev.get("message"))
        tally.set_model(message.get("model"))
        # Only the input count: message_start's output_tokens is a placeholder. Cache reads
        # and writes are reported apart from input_tokens and not added to it.
        usage = as_dict(message.get("usage"))
        tally.usage(usage.get("input_tokens"), None, None)
        _cache(tally, usage)
    elif kind == "content_block_start":
        _block_start(tally, ev)
    elif kind == "message_delta":
        stop = as_dict(ev.get("delta")).get("stop_reason")
        if isinstance(stop, str):
            tally.stop_reason = stop
        usage = as_dict(ev.get("usage"))
        # Cumulative counts: the last one is the total. ``usage.iterations`` (compaction, the
        # advisor's model) itemises sampling steps; only the top-level counts are read, so
        # nothing is counted twice.
        tally.usage(usage.get("input_tokens"), usage.get("output_tokens"), None)
        _cache(tally, usage)
    elif kind == "message_stop":
        _stop(tally, tally.stop_reason)
    elif kind == "error":
        err = as_dict(ev.get("error"))
        tally.end(Outcome.ERROR, as_str(err.get("type")) or as_str(err.get("message")) or "error")
    elif kind not in MESSAGES_EVENTS:
        tally.unknown(seq, str(kind))
    return False


def _cache(tally: Tally, usage: dict[str, Any]) -> None:
    tally.usage_details(
        cache_read=usage.get("cache_read_input_tokens"),
        cache_write=usage.get("cache_creation_input_tokens"),
        web_searches=as_dict(usage.get("server_tool_use")).get("web_search_requests"),
    )


def _block_start(tally: Tally, ev: dict[str, Any]) -> None:
    block = as_dict(ev.get("content_block"))
    kind = block.get("type")
    # Starts normally hold empty values, but a non-empty one is part of the answer.
    if kind == "text":
        tally.text.append(as_str(block.get("text")))
    elif kind == "thinking":
        tally.reasoning.append(as_str(block.get("thinking")))
    elif kind == "tool_use":
        entry = tally.tool(_block_key(ev))
        entry.id, entry.name = as_str(block.get("id")), as_str(block.get("name"))
        if isinstance(block.get("input"), dict) and block["input"]:
            entry.final = orjson.dumps(block["input"]).decode()
    elif isinstance(kind, str) and (kind in _SERVER_USE or kind.endswith("_tool_use")):
        tally.server_blocks.add(_block_key(ev))


def _stop(tally: Tally, stop: str | None) -> None:
    for entry in tally.tools.values():
        # Streamed JSON wins over the start's input; a call without any is "{}".
        if entry.parts and "".join(entry.parts):
            entry.final = None
        elif entry.final is None:
            entry.final = "{}"
    tally.end(_STOP.get(stop, Outcome.COMPLETED) if stop else Outcome.COMPLETED, stop)


def body(tally: Tally, obj: dict[str, Any]) -> None:
    """A whole ``message`` object, or an ``error`` object sent with HTTP 200."""
    if obj.get("type") == "error":
        err = as_dict(obj.get("error"))
        tally.end(Outcome.ERROR, as_str(err.get("type")) or as_str(err.get("message")) or "error")
        return
    tally.set_model(obj.get("model"))
    usage = as_dict(obj.get("usage"))
    tally.usage(usage.get("input_tokens"), usage.get("output_tokens"), None)
    _cache(tally, usage)
    blocks = obj.get("content")
    for i, block in enumerate(blocks if isinstance(blocks, list) else ()):
        block = as_dict(block)
        kind = block.get("type")
        if kind == "text":
            tally.text.append(as_str(block.get("text")))
        elif kind == "thinking":
            tally.reasoning.append(as_str(block.get("thinking")))
        elif kind == "tool_use":
            entry = tally.tool(("block", i))
            entry.id, entry.name = as_str(block.get("id")), as_str(block.get("name"))
            entry.final = orjson.dumps(block.get("input", {})).decode()
    stop = obj.get("stop_reason")
    _stop(tally, stop if isinstance(stop, str) else None)


RULES = ApiRules(
    name="messages",
    paths=("/messages",),
    event=event,
    body=body,
    claims_event=lambda kind, _obj: kind == "message_start",
    claims_body=lambda obj: obj.get("type") == "message",
    no_terminal="The stream ended without message_stop or error.",
    terminal_events=frozenset({"message_stop"}),
    error_events=frozenset({"error"}),
    content_events=frozenset({"content_block_delta"}),
    input_excludes_cache=True,
)
