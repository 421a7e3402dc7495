"""Event builder for the Anthropic Messages endpoint.

Follows the gateway's "Streaming events" sequence for Messages (``message_start``, content
blocks with their deltas, ``message_delta`` with the stop reason and usage, ``message_stop``,
``ping`` between) and the wire format the official ``anthropic`` SDK parses; see
:mod:`ssetape.simulator.scenario` for the scenario keywords.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable
from typing import Any

import orjson

from ssetape.simulator.scenario import (
    TOKEN_GAP,
    TTFB,
    Plan,
    Scenario,
    answer_tokens,
    error_response,
    json_plan,
    pieces,
    tool_arguments,
    word_tokens,
)
from ssetape.simulator.script import Script, sse, stream_plan

OVERLOADED = {"type": "overloaded_error", "message": "Overloaded"}
# fmt: off
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
                529: "overloaded_error"}
# fmt: on


def error(sc: Scenario | None, status: int, message: str, speed: float) -> Plan:
    """An HTTP error in Anthropic's shape."""
    body = {
        "type": "error",
        "error": {"type": _ERROR_TYPES.get(status, "api_error"), "message": message},
    }
    return error_response(sc, status, body, speed)


def _tool(sc: Scenario) -> tuple[str, str, dict[str, Any]] | None:
    """(name, JSON input, input) of the tool the model uses, if it uses one."""
    choice = sc.body.get("tool_choice")
    if (
        sc.after_tool
        or sc.has("refusal")
        or (isinstance(choice, dict) and choice.get("type") == "none")
    ):
        return None
    for tool in sc.body.get("tools") or []:
        if isinstance(tool, dict) and isinstance(tool.get("name"), str) and "input_schema" in tool:
            args = tool_arguments(tool["input_schema"], sc.prompt)
            return tool["name"], orjson.dumps(args).decode(), args
    return None


def _thinking(sc: Scenario) -> list[str]:
    config = sc.body.get("thinking")
    enabled = isinstance(config, dict) and config.get("type") in ("enabled", "adaptive")
    if not (enabled or sc.has("reasoning")):
        return []
    return answer_tokens("thinking: " + sc.prompt, 8)


def _signature(thinking: str) -> str:
    # Opaque like the real one, but stable for the same thinking text.
    return base64.b64encode(hashlib.sha256(thinking.encode()).digest() * 3).decode()


def _ev(kind: str, **fields: Any) -> bytes:
    return sse({"type": kind, **fields}, kind)


def _delta(index: int, kind: str, key: str) -> Callable[[str], bytes]:
    """Makes the content_block_delta events of one block."""

    def make(value: str) -> bytes:
        return _ev("content_block_delta", index=index, delta={"type": kind, key: value})

    return make


def messages(sc: Scenario, speed: float) -> Plan:
    tool = _tool(sc)
    thinking = _thinking(sc)
    refusal = sc.has("refusal")
    if tool:
        text = word_tokens(f"I'll use {tool[0]} for that.")
    elif refusal:
        text = [] if sc.has("silent") else list(sc.tokens[:3])
    else:
        text = list(sc.tokens)
    args = pieces(tool[1]) if tool else []
    stop_reason = "max_tokens" if sc.truncated else "end_turn"
    if tool or refusal:
        stop_reason = "tool_use" if tool else "refusal"
    output_tokens = len(thinking) + len(text) + len(args)
    usage = {
        "input_tokens": sc.prompt_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": output_tokens,
    }
    blocks: list[dict[str, Any]] = []
    if thinking:
        joined = "".join(thinking)
        blocks.append({"type": "thinking", "thinking": joined, "signature": _signature(joined)})
    if text:
        blocks.append({"type": "text", "text": "".join(text)})
    if tool:
        blocks.append(
            {"type": "tool_use", "id": sc.ident("toolu_01"), "name": tool[0], "input": tool[2]}
        )
    message = {
        "id": sc.ident("msg_01"),
        "type": "message",
        "role": "assistant",
        "model": sc.model,
        "content": blocks,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage,
    }
    if not sc.stream:
        if sc.failure is not None and sc.failure != "cut":
            return error(sc, 529, "Overloaded", speed)
        return json_plan(sc, message, speed, after=TTFB + TOKEN_GAP * output_tokens)

    s = Script(sc)

    start_usage = {**usage, "output_tokens": 1}
    opening = {**message, "content": [], "stop_reason": None, "usage": start_usage}
    s.emit(_ev("message_start", message=opening), TTFB)
    s.emit(_ev("ping"), s.jitter(0.005))
    ok = True
    for index, block in enumerate(blocks):
        if index:
            s.emit(_ev("ping"), s.jitter(0.005))
        kind = block["type"]
        start: dict[str, Any] = {"type": kind, "text": ""}
        if kind == "thinking":
            start = {"type": kind, "thinking": "", "signature": ""}
        elif kind == "tool_use":
            start = {**block, "input": {}}
        s.emit(_ev("content_block_start", index=index, content_block=start), s.jitter(0.01))
        if kind == "thinking":
            s.stream(thinking, _delta(index, "thinking_delta", "thinking"), main=False)
            signature = {"type": "signature_delta", "signature": block["signature"]}
            s.emit(_ev("content_block_delta", index=index, delta=signature))
        elif kind == "text":
            ok = s.stream(text, _delta(index, "text_delta", "text"), main=not tool)
        else:
            s.emit(_delta(index, "input_json_delta", "partial_json")(""))
            ok = s.stream(args, _delta(index, "input_json_delta", "partial_json"))
        if not ok:
            break
        s.emit(_ev("content_block_stop", index=index), s.jitter(0.005))
    delta = {"stop_reason": stop_reason, "stop_sequence": None}
    final = _ev("message_delta", delta=delta, usage={"output_tokens": output_tokens})
    # A failure with no answer stream to break (a silent refusal) breaks here.
    if not ok or sc.failure is not None:
        if sc.failure == "cut":
            if not s.cut:
                s.emit_cut(final)
        else:
            s.emit(_ev("error", error=OVERLOADED))
        return stream_plan(sc, s, speed)
    s.emit(final, s.jitter(0.01))
    s.glue(_ev("message_stop"))
    return stream_plan(sc, s, speed)
