"""Event builders for the OpenAI-style endpoints: Chat Completions, Responses, Images.

Formats follow the sequences of the gateway ssetape was first built for (its "Streaming
events" document: a role delta, content deltas, a finish_reason chunk, a usage chunk when
asked, ``data: [DONE]``; Responses from ``response.created`` to one terminal) and the wire
format the official ``openai`` SDK parses; :mod:`ssetape.simulator.scenario` documents the
scenario keywords.
"""

from __future__ import annotations

import base64
import struct
import zlib
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
from ssetape.simulator.script import Script, comment, sse, stream_plan

REFUSAL = "I'm sorry, but I can't help with that."
FAILURE = "The upstream model failed while generating the response."
SERVER_ERROR = {"code": "server_error", "message": FAILURE}
DONE = b"data: [DONE]\n\n"
PARTIAL, COMPLETED = "image_generation.partial_image", "image_generation.completed"
_REASONING_MODELS = ("o1", "o3", "o4", "gpt-5")
# fmt: off
_ERROR_CODES = {400: "invalid_request_error", 401: "invalid_api_key", 403: "permission_denied",
                404: "not_found", 413: "request_too_large", 429: "rate_limit_exceeded"}
# fmt: on
# fmt: off
_IMAGE_ERROR = {"type": "image_generation_server_error", **SERVER_ERROR, "param": None}
_RESPONSE_DEFAULTS = {
    "object": "response", "background": False, "error": None, "incomplete_details": None,
    "parallel_tool_calls": True, "reasoning": {"effort": None, "summary": None}, "store": False,
    "temperature": 1.0, "text": {"format": {"type": "text"}}, "top_p": 1.0,
    "truncation": "disabled", "usage": None, "metadata": {},
}
# fmt: on


def error(
    sc: Scenario | None, status: int, message: str, speed: float, code: str | None = None
) -> Plan:
    """An HTTP error in OpenAI's shape."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    kind = "requests" if status == 429 else kind
    code = code or _ERROR_CODES.get(status, "server_error")
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return error_response(sc, status, body, speed)


def _pick_tool(sc: Scenario, nested: bool) -> tuple[str, str] | None:
    """(name, JSON arguments) of the function the model calls, if it calls one."""
    if sc.after_tool or sc.body.get("tool_choice") == "none" or sc.has("refusal"):
        return None
    for tool in sc.body.get("tools") or []:
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            continue
        spec = tool.get("function") if nested else tool
        if isinstance(spec, dict) and isinstance(spec.get("name"), str):
            args = tool_arguments(spec.get("parameters"), sc.prompt)
            return spec["name"], orjson.dumps(args).decode()
    return None


def _usage_chat(sc: Scenario, completion: int) -> dict[str, int]:
    prompt = sc.prompt_tokens
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def chat(sc: Scenario, speed: float) -> Plan:
    tool = _pick_tool(sc, nested=True)
    call_id, refusal = sc.ident("call_"), sc.has("refusal")
    if tool:
        tokens = pieces(tool[1])
    elif refusal:
        tokens = [] if sc.has("silent") else word_tokens(REFUSAL)
    else:
        tokens = list(sc.tokens)
    finish = "tool_calls" if tool else "length" if sc.truncated else "stop"
    base = {
        "id": sc.ident("gen-", 20),
        "object": "chat.completion",
        "created": sc.created,
        "model": sc.model,
    }
    if not sc.stream:
        if sc.failure not in (None, "cut"):
            return error(sc, 500, FAILURE, speed)
        message: dict[str, Any] = {
            "role": "assistant",
            "content": None if tool or refusal else sc.text,
            "refusal": "".join(tokens) if refusal else None,
        }
        if tool:
            function = {"name": tool[0], "arguments": tool[1]}
            message["tool_calls"] = [{"id": call_id, "type": "function", "function": function}]
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
        body = {**base, "choices": [choice], "usage": _usage_chat(sc, len(tokens))}
        return json_plan(sc, body, speed, TTFB + TOKEN_GAP * len(tokens))

    s = Script(sc, chatter=True)
    base["object"] = "chat.completion.chunk"

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return sse({**base, "choices": [choice], **extra})

    s.emit(comment("OPENROUTER PROCESSING"), TTFB)
    s.emit(chunk({"role": "assistant", "content": ""}), s.jitter(0.05))
    if tool:
        function = {"name": tool[0], "arguments": ""}
        s.emit(
            chunk(
                {
                    "tool_calls": [
                        {"index": 0, "id": call_id, "type": "function", "function": function}
                    ]
                }
            )
        )
        ok = s.stream(
            tokens, lambda t: chunk({"tool_calls": [{"index": 0, "function": {"arguments": t}}]})
        )
    else:
        ok = s.stream(tokens, lambda t: chunk({"refusal" if refusal else "content": t}))
    final = chunk({}, finish)
    if not ok:
        if sc.failure == "cut" and not s.cut:
            s.emit_cut(final)
        elif not s.cut:
            s.emit(chunk({"content": ""}, "error", error=SERVER_ERROR))
        return stream_plan(sc, s, speed)
    s.emit(final)
    usage = _usage_chat(sc, len(tokens))
    if (sc.body.get("stream_options") or {}).get("include_usage") is True:
        s.emit(sse({**base, "choices": [], "usage": usage}), s.jitter(0.01))
    else:
        s.emit(chunk({}, None, usage=usage), s.jitter(0.01))
    s.glue(DONE)
    return stream_plan(sc, s, speed)


class _Seq:
    """Makes Responses events, which carry a running ``sequence_number``."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self, kind: str, **fields: Any) -> bytes:
        self.n += 1
        return sse({"type": kind, "sequence_number": self.n - 1, **fields}, kind)


def _reasoning(sc: Scenario) -> bool:
    model = sc.model.lower().rsplit("/", 1)[-1]
    return sc.has("reasoning") or model.startswith(_REASONING_MODELS) or "reasoning" in sc.body


def _response(sc: Scenario, status: str, output: list[Any], **extra: Any) -> dict[str, Any]:
    body = sc.body
    return {
        "id": sc.ident("resp_"),
        "created_at": sc.created,
        "status": status,
        "model": sc.model,
        "output": output,
        **_RESPONSE_DEFAULTS,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "previous_response_id": body.get("previous_response_id"),
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        **extra,
    }


def responses(sc: Scenario, speed: float) -> Plan:
    tool = _pick_tool(sc, nested=False)
    thinking = answer_tokens("reasoning: " + sc.prompt, 8) if _reasoning(sc) else []
    refusal = word_tokens(REFUSAL) if sc.has("refusal") else []
    text = list(sc.tokens[:3] if refusal else sc.tokens)
    args = pieces(tool[1]) if tool else []
    status = "incomplete" if sc.truncated and not tool else "completed"
    text_part = {"type": "output_text", "annotations": [], "logprobs": [], "text": "".join(text)}
    refusal_part = {"type": "refusal", "refusal": "" if sc.has("silent") else REFUSAL}
    output: list[Any] = []
    if thinking:
        content = [{"type": "reasoning_text", "text": "".join(thinking)}]
        output.append(
            {"id": sc.ident("rs_"), "type": "reasoning", "summary": [], "content": content}
        )
    if tool:
        output.append(
            {
                "id": sc.ident("fc_"),
                "type": "function_call",
                "status": "completed",
                "arguments": tool[1],
                "call_id": sc.ident("call_"),
                "name": tool[0],
            }
        )
    else:
        parts = [text_part, refusal_part] if refusal else [text_part]
        output.append(
            {
                "id": sc.ident("msg_"),
                "type": "message",
                "status": status,
                "role": "assistant",
                "content": parts,
            }
        )
    n_out = len(args) if tool else len(text)
    usage = {
        "input_tokens": sc.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": n_out + len(thinking),
        "output_tokens_details": {"reasoning_tokens": len(thinking)},
        "total_tokens": sc.prompt_tokens + n_out + len(thinking),
    }
    final: dict[str, Any] = {"usage": usage}
    if status == "incomplete":
        final["incomplete_details"] = {"reason": "max_output_tokens"}
    failed = _response(sc, "failed", output[:-1], error=SERVER_ERROR, usage=usage)
    if not sc.stream:
        if sc.failure == "unresolved":
            return error(sc, 500, FAILURE, speed)
        done = (
            failed if sc.failure in ("error", "failed") else _response(sc, status, output, **final)
        )
        return json_plan(sc, done, speed, TTFB + TOKEN_GAP * (n_out + len(thinking)))

    s, ev = Script(sc, chatter=True), _Seq()
    s.emit(comment("OPENROUTER PROCESSING"), TTFB)
    s.emit(ev("response.created", response=_response(sc, "in_progress", [])), s.jitter(0.05))
    s.glue(ev("response.in_progress", response=_response(sc, "in_progress", [])))
    if thinking:
        item = output[0]
        s.emit(ev("response.output_item.added", output_index=0, item={**item, "content": []}))
        ids = {"item_id": item["id"], "output_index": 0, "content_index": 0}
        s.stream(thinking, lambda t: ev("response.reasoning_text.delta", **ids, delta=t), False)
        s.emit(ev("response.reasoning_text.done", **ids, text=item["content"][0]["text"]))
        s.emit(ev("response.output_item.done", output_index=0, item=item), s.jitter(0.1))
    at, item = len(output) - 1, output[-1]
    if tool:
        added = {**item, "status": "in_progress", "arguments": ""}
        s.emit(ev("response.output_item.added", output_index=at, item=added))
        ids = {"item_id": item["id"], "output_index": at}
        ok = s.stream(args, lambda t: ev("response.function_call_arguments.delta", **ids, delta=t))
        if ok:
            s.emit(
                ev("response.function_call_arguments.done", **ids, name=tool[0], arguments=tool[1])
            )
    else:
        added = {**item, "status": "in_progress", "content": []}
        s.emit(ev("response.output_item.added", output_index=at, item=added))
        ids = {"item_id": item["id"], "output_index": at, "content_index": 0}
        s.emit(ev("response.content_part.added", **ids, part={**text_part, "text": ""}))
        ok = s.stream(text, lambda t: ev("response.output_text.delta", **ids, delta=t, logprobs=[]))
        if ok:
            s.emit(ev("response.output_text.done", **ids, text=text_part["text"], logprobs=[]))
            s.glue(ev("response.content_part.done", **ids, part=text_part))
        if ok and refusal:
            # The refusal is a second content part, after the text already produced.
            ids["content_index"] = 1
            empty = {"type": "refusal", "refusal": ""}
            s.emit(ev("response.content_part.added", **ids, part=empty))
            said = [] if sc.has("silent") else refusal
            ok = s.stream(said, lambda t: ev("response.refusal.delta", **ids, delta=t))
            if ok:
                s.emit(ev("response.refusal.done", **ids, refusal=refusal_part["refusal"]))
                s.glue(ev("response.content_part.done", **ids, part=refusal_part))
    if not ok:
        if sc.failure == "cut" and not s.cut:
            s.emit_cut(ev("response.output_item.done", output_index=at, item=item))
        elif sc.failure == "unresolved":
            s.emit(ev("error", code="response_unresolved", message=FAILURE, param=None))
        elif sc.failure != "cut":
            s.emit(ev("response.failed", response=failed))
        return stream_plan(sc, s, speed)
    s.emit(ev("response.output_item.done", output_index=at, item=item))
    kind = "response.incomplete" if status == "incomplete" else "response.completed"
    s.emit(ev(kind, response=_response(sc, status, output, **final)), s.jitter(0.01))
    return stream_plan(sc, s, speed)


def png(seed: int, block: int = 1, size: int = 32) -> bytes:
    """A small deterministic RGB PNG; a larger ``block`` gives a coarser (partial) image."""
    r0, g0, b0 = seed & 0xFF, (seed >> 8) & 0xFF, (seed >> 16) & 0xFF
    rows = bytearray()
    for y in range(size):
        rows.append(0)  # no filter on this scanline
        for x in range(size):
            qx, qy = x - x % block, y - y % block
            rows += bytes(((r0 + 6 * qx) & 0xFF, (g0 + 6 * qy) & 0xFF, (b0 + 3 * (qx + qy)) & 0xFF))

    def part(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    header = part(b"IHDR", struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0))
    return (
        b"\x89PNG\r\n\x1a\n" + header + part(b"IDAT", zlib.compress(rows, 9)) + part(b"IEND", b"")
    )


def images(sc: Scenario, speed: float) -> Plan:
    body = sc.body
    if sc.stream and sc.model.startswith("dall-e"):
        return error(sc, 400, f"Streaming is not supported for {sc.model}.", speed)
    size = body.get("size") if body.get("size") in ("1024x1536", "1536x1024", "auto") else None
    quality = body.get("quality") if body.get("quality") in ("low", "high", "auto") else None
    common = {
        "background": "transparent" if body.get("background") == "transparent" else "opaque",
        "created_at": sc.created,
        "output_format": "png",
        "quality": quality or "medium",
        "size": size or "1024x1024",
    }
    image = base64.b64encode(png(sc.seed)).decode()
    usage = {
        "input_tokens": sc.prompt_tokens,
        "output_tokens": 272,
        "total_tokens": sc.prompt_tokens + 272,
        "input_tokens_details": {"image_tokens": 0, "text_tokens": sc.prompt_tokens},
    }
    if not sc.stream:
        if sc.failure not in (None, "cut"):
            return error(sc, 500, FAILURE, speed)
        result = {**common, "created": sc.created, "data": [{"b64_json": image}], "usage": usage}
        del result["created_at"]
        return json_plan(sc, result, speed, TTFB * 8)

    s = Script(sc)
    count = body.get("partial_images")
    count = min(3, max(0, count)) if isinstance(count, int) else 0
    failure = sse({"type": "error", "error": _IMAGE_ERROR}, "error")
    if sc.failure == "error" and sc.has("early") and count:
        s.emit(failure, TTFB * 5)
        return stream_plan(sc, s, speed)
    for i in range(count):
        b64 = base64.b64encode(png(sc.seed, block=8 >> i)).decode()
        event = {"type": PARTIAL, "b64_json": b64, **common, "partial_image_index": i}
        s.emit(sse(event, PARTIAL), TTFB * 5 if i == 0 else s.jitter(0.4))
    if sc.has("pause"):
        s.pause()
    after = TTFB * 5 if count == 0 else s.jitter(0.4)
    completed = sse({"type": COMPLETED, "b64_json": image, **common, "usage": usage}, COMPLETED)
    if sc.failure == "cut":
        s.emit_cut(completed, after)
    elif sc.failure is not None:
        s.emit(failure, after)
    else:
        s.emit(completed, after, "line")
        s.glue(DONE)
    return stream_plan(sc, s, speed)
