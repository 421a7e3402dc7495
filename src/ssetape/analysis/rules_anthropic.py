"""Analysis rules for the Anthropic Messages API, streamed and whole.

Like :mod:`ssetape.analysis.rules_openai`, the functions update a :class:`~ssetape.analysis.tally.Tally`
and type-check every field of the payloads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from ssetape.analysis.tally import Tally

__all__ = ["MESSAGES_EVENTS", "message_body", "messages_event"]

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
    "end_turn": "completed",
    "tool_use": "completed",
    "stop_sequence": "completed",
    "pause_turn": "completed",
    "max_tokens": "incomplete",
    "model_context_window_exceeded": "incomplete",
    "refusal": "refused",
}
# delta type -> (field holding the value, where it goes); signature_delta carries no content.
_DELTAS = {
    "text_delta": ("text", "text"),
    "thinking_delta": ("thinking", "reasoning"),
    "input_json_delta": ("partial_json", "tool"),
    "signature_delta": ("signature", ""),
}


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def _block_key(ev: dict[str, Any]) -> tuple[str, int]:
    index = ev.get("index")
    return ("block", index if isinstance(index, int) else -1)


def messages_event(tally: Tally, seq: int, kind: str, ev: dict[str, Any]) -> bool:
    if kind == "content_block_delta":
        delta = _dict(ev.get("delta"))
        dtype = _str(delta.get("type"))
        if dtype not in _DELTAS:
            tally.unknown(seq, f"content_block_delta {dtype or '(no type)'}")
            return False
        key, target = _DELTAS[dtype]
        value = _str(delta.get(key))
        if not (value and target):
            return False
        if target == "text":
            tally.text.append(value)
        elif target == "reasoning":
            tally.reasoning.append(value)
        else:
            tally.tool(_block_key(ev)).parts.append(value)
        return True
    if kind == "message_start":
        message = _dict(ev.get("message"))
        tally.set_model(message.get("model"))
        # Only the input count: message_start's output_tokens is a placeholder, and cache
        # reads/writes are reported apart from input_tokens and not added to it.
        tally.usage(_dict(message.get("usage")).get("input_tokens"), None, None)
    elif kind == "content_block_start":
        _block_start(tally, ev)
    elif kind == "message_delta":
        stop = _dict(ev.get("delta")).get("stop_reason")
        if isinstance(stop, str):
            tally.stop_reason = stop
        usage = _dict(ev.get("usage"))
        # Cumulative counts: the last one is the total.
        tally.usage(usage.get("input_tokens"), usage.get("output_tokens"), None)
    elif kind == "message_stop":
        _stop(tally, tally.stop_reason)
    elif kind == "error":
        err = _dict(ev.get("error"))
        reason = _str(err.get("type")) or _str(err.get("message")) or "error"
        tally.end("error", reason)
    elif kind not in MESSAGES_EVENTS:
        tally.unknown(seq, kind)
    return False


def _block_start(tally: Tally, ev: dict[str, Any]) -> None:
    block = _dict(ev.get("content_block"))
    kind = block.get("type")
    # Starts normally hold empty values, but a non-empty one is part of the answer.
    if kind == "text":
        tally.text.append(_str(block.get("text")))
    elif kind == "thinking":
        tally.reasoning.append(_str(block.get("thinking")))
    elif kind == "tool_use":
        entry = tally.tool(_block_key(ev))
        entry.id, entry.name = _str(block.get("id")), _str(block.get("name"))
        if isinstance(block.get("input"), dict) and block["input"]:
            entry.final = orjson.dumps(block["input"]).decode()


def _stop(tally: Tally, stop: str | None) -> None:
    for entry in tally.tools.values():
        # Streamed JSON wins over the start's input; a call without any is "{}".
        if entry.parts and "".join(entry.parts):
            entry.final = None
        elif entry.final is None:
            entry.final = "{}"
    tally.end(_STOP.get(stop, "completed") if stop else "completed", stop)


def message_body(tally: Tally, obj: dict[str, Any]) -> None:
    """A whole ``message`` object, or an ``error`` object sent with HTTP 200."""
    if obj.get("type") == "error":
        err = _dict(obj.get("error"))
        tally.end("error", _str(err.get("type")) or _str(err.get("message")) or "error")
        return
    tally.set_model(obj.get("model"))
    usage = _dict(obj.get("usage"))
    tally.usage(usage.get("input_tokens"), usage.get("output_tokens"), None)
    blocks = obj.get("content")
    for i, block in enumerate(blocks if isinstance(blocks, list) else ()):
        block = _dict(block)
        kind = block.get("type")
        if kind == "text":
            tally.text.append(_str(block.get("text")))
        elif kind == "thinking":
            tally.reasoning.append(_str(block.get("thinking")))
        elif kind == "tool_use":
            entry = tally.tool(("block", i))
            entry.id, entry.name = _str(block.get("id")), _str(block.get("name"))
            entry.final = orjson.dumps(block.get("input", {})).decode()
    stop = obj.get("stop_reason")
    _stop(tally, stop if isinstance(stop, str) else None)
