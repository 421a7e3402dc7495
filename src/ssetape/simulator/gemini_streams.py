"""Builder for Google's Gemini endpoints: ``:streamGenerateContent`` and ``:generateContent``.

Every chunk is a whole ``GenerateContentResponse`` (REST JSON, camelCase) carrying the next
token(s) in ``candidates[0].content.parts``; the last one adds ``finishReason`` and the full
``usageMetadata``. There is no end marker besides it. What the google-genai SDK asks for,
``?alt=sse``, frames each chunk as ``data: {json}`` ended by CRLF CRLF; without it the chunks
are the elements of one JSON array streamed over chunked ``application/json`` (``[`` before
the first element, ``\\r\\n,`` before the others, ``\\r\\n]`` at the end), which is what
:mod:`ssetape.framing.json_array` splits. ``:generateContent`` answers one JSON object.

Scenario keywords (see :mod:`ssetape.simulator.scenario`) map to Gemini's own signals: a
token limit ends with ``MAX_TOKENS``; refusal stops with ``SAFETY`` after a little text, or
with silent blocks the prompt (``promptFeedback.blockReason``); error, failed and unresolved
send a Google error object mid-stream (HTTP 500 without streaming); reasoning (or
``thinkingConfig.includeThoughts``) streams thought parts first. Gemini sends no keep-alive
comments, so pause is plain silence.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any
from urllib.parse import parse_qs

import orjson

from ssetape.simulator.scenario import (
    PAUSE,
    SPLIT_GAP,
    TOKEN_GAP,
    TTFB,
    Plan,
    Scenario,
    Split,
    answer_tokens,
    error_response,
    json_plan,
    tool_arguments,
)
from ssetape.simulator.script import Script, stream_plan

__all__ = ["FAILURE", "STATUSES", "error", "gemini"]

FAILURE = "An internal error has occurred. Please retry or report the problem."
JSON_TYPE = "application/json; charset=UTF-8"
SSE_TYPE = "text/event-stream"
# HTTP status -> the google.rpc.Code name Google's APIs put in error.status.
# fmt: off
STATUSES = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
            404: "NOT_FOUND", 409: "ABORTED", 429: "RESOURCE_EXHAUSTED", 499: "CANCELLED",
            500: "INTERNAL", 501: "NOT_IMPLEMENTED", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}
# fmt: on
_SAFETY_CATEGORIES = (
    "HARM_CATEGORY_HATE_SPEECH",
    "HARM_CATEGORY_DANGEROUS_CONTENT",
    "HARM_CATEGORY_HARASSMENT",
    "HARM_CATEGORY_SEXUALLY_EXPLICIT",
)


def _error_body(status: int, message: str) -> dict[str, Any]:
    name = STATUSES.get(status, "INVALID_ARGUMENT" if status < 500 else "INTERNAL")
    return {"error": {"code": status, "message": message, "status": name}}


def _content_type(plan: Plan, content_type: str) -> Plan:
    """``plan`` with Google's content type instead of the shared builders' default."""
    headers = [(k, content_type if k == "content-type" else v) for k, v in plan.headers]
    return replace(plan, headers=headers)


def error(sc: Scenario | None, status: int, message: str, speed: float) -> Plan:
    """An HTTP error in Google's shape."""
    return _content_type(error_response(sc, status, _error_body(status, message), speed), JSON_TYPE)


class _Framing:
    """Frames each response as an SSE event or as the next element of the JSON array."""

    def __init__(self, array: bool) -> None:
        self.array = array
        self.started = False

    def __call__(self, obj: Any) -> bytes:
        data = orjson.dumps(obj)
        if not self.array:
            return b"data: " + data + b"\r\n\r\n"
        head = b"\r\n," if self.started else b"["
        self.started = True
        return head + data

    def end(self) -> bytes:
        return b"\r\n]" if self.started else b"[]"


class _Script(Script):
    """Gemini's writes: no keep-alive comments, and array pieces split inside the element."""

    def __init__(self, sc: Scenario, array: bool) -> None:
        super().__init__(sc)
        self.array = array

    def wait(self, seconds: float) -> None:
        """Delay the next write by ``seconds`` more than its usual gap."""
        self._hold += seconds

    def pause(self) -> None:
        # Gemini sends nothing while it is silent: the next write just comes later.
        self._hold = PAUSE

    def emit(self, data: bytes, after: float | None = None, split: Split | None = None) -> None:
        if not (self.array and split == "line") or self.plain:
            super().emit(data, after, split)
            return
        # A mid-line split of an array piece would fall in the CRLF before its comma; the
        # case worth simulating is a piece split inside the element's JSON.
        at = self._middle(data)
        super().emit(data[:at], after)
        super().emit(data[at:], SPLIT_GAP)

    def emit_cut(self, data: bytes, after: float | None = None) -> None:
        if not self.array:
            super().emit_cut(data, after)
            return
        super().emit(data[: self._middle(data)], after)
        self.cut = True

    @staticmethod
    def _middle(data: bytes) -> int:
        at = max(1, len(data) // 2)
        while at > 1 and 0x80 <= data[at] < 0xC0:
            at -= 1  # not also a UTF-8 split
        return at


def _tool(sc: Scenario) -> tuple[str, dict[str, Any]] | None:
    """(name, args) of the function the model calls, if it calls one."""
    config = sc.body.get("toolConfig")
    calling = config.get("functionCallingConfig") if isinstance(config, dict) else None
    mode = calling.get("mode") if isinstance(calling, dict) else None
    if sc.after_tool or sc.has("refusal") or mode == "NONE":
        return None
    for tool in sc.body.get("tools") or []:
        declarations = tool.get("functionDeclarations") if isinstance(tool, dict) else None
        for fn in declarations if isinstance(declarations, list) else ():
            if isinstance(fn, dict) and isinstance(fn.get("name"), str):
                schema = fn.get("parameters", fn.get("parametersJsonSchema"))
                return fn["name"], tool_arguments(schema, sc.prompt)
    return None


def _thinking(sc: Scenario) -> list[str]:
    config = sc.body.get("generationConfig")
    thinking = config.get("thinkingConfig") if isinstance(config, dict) else None
    shown = isinstance(thinking, dict) and thinking.get("includeThoughts") is True
    return answer_tokens("thinking: " + sc.prompt, 8) if shown or sc.has("reasoning") else []


def _usage(sc: Scenario, output: int | None, thoughts: int) -> dict[str, Any]:
    """usageMetadata as Gemini sends it: zero counts left out, as proto3 JSON does; the
    candidates count (only once known) excludes the thoughts, the total includes them."""
    usage: dict[str, Any] = {"promptTokenCount": sc.prompt_tokens}
    if output:
        usage["candidatesTokenCount"] = output
    usage["totalTokenCount"] = sc.prompt_tokens + (output or 0) + thoughts
    usage["promptTokensDetails"] = [{"modality": "TEXT", "tokenCount": sc.prompt_tokens}]
    if thoughts:
        usage["thoughtsTokenCount"] = thoughts
    return usage


def gemini(sc: Scenario, speed: float) -> Plan:
    tool = _tool(sc)
    thinking = _thinking(sc)
    blocked = sc.has("refusal") and sc.has("silent")
    if tool or blocked:
        text: list[str] = []
    else:
        text = list(sc.tokens[:3] if sc.has("refusal") else sc.tokens)
    finish = "MAX_TOKENS" if sc.truncated and not tool else "STOP"
    if sc.has("refusal"):
        finish = "SAFETY"
    output = len(text) + (len(orjson.dumps(tool[1])) // 4 if tool else 0)
    thoughts = len(thinking)
    base = {"modelVersion": sc.model, "responseId": sc.ident("", 22)}
    call = {"functionCall": {"name": tool[0], "args": tool[1]}} if tool else None
    ratings = [
        {"category": c, "probability": "HIGH" if i == 1 else "NEGLIGIBLE"}
        | ({"blocked": True} if i == 1 else {})
        for i, c in enumerate(_SAFETY_CATEGORIES)
    ]

    def response(parts: list[dict[str, Any]], thoughts: int, end: bool = False) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}}
        if end:
            candidate["finishReason"] = finish
            if finish == "SAFETY":
                candidate["safetyRatings"] = ratings
        candidate["index"] = 0
        usage = _usage(sc, output if end else None, thoughts)
        return {"candidates": [candidate], "usageMetadata": usage, **base}

    blocked_response = {
        "promptFeedback": {"blockReason": "SAFETY", "safetyRatings": ratings},
        "usageMetadata": _usage(sc, None, 0),
        **base,
    }
    if not sc.stream:
        if sc.failure not in (None, "cut"):
            return error(sc, 500, FAILURE, speed)
        parts: list[dict[str, Any]] = []
        if thinking:
            parts.append({"text": "".join(thinking), "thought": True})
        if text:
            parts.append({"text": "".join(text)})
        if call:
            parts.append(call)
        whole = blocked_response if blocked else response(parts, thoughts, end=True)
        plan = json_plan(sc, whole, speed, TTFB + TOKEN_GAP * (output + thoughts))
        return _content_type(plan, JSON_TYPE)

    array = parse_qs(sc.query).get("alt") != ["sse"]
    s, frame = _Script(sc, array), _Framing(array)
    # No prelude as other APIs have: the first chunk already carries the first token.
    s.wait(TTFB)
    if blocked:
        s.emit(frame(blocked_response))
        return _stream(sc, s, frame, speed)
    if thinking:
        thought = {"thought": True}
        s.stream(thinking, lambda t: frame(response([{"text": t, **thought}], 0)), main=False)
    # The last chunk carries the last token (or the call) with finishReason and the usage.
    ok = s.stream(text[:-1], lambda t: frame(response([{"text": t}], thoughts)))
    last = [{"text": text[-1]}] if text else [call] if call else []

    def final() -> bytes:
        return frame(response(last, thoughts, end=True))

    if not ok or sc.failure is not None:
        # A failure with no answer to break (a tool call) breaks at the last chunk.
        if sc.failure == "cut":
            if not s.cut:
                s.emit_cut(final())
        else:
            s.emit(frame(_error_body(500, FAILURE)))
        return _stream(sc, s, frame, speed)
    s.emit(final())
    return _stream(sc, s, frame, speed)


def _stream(sc: Scenario, s: _Script, frame: _Framing, speed: float) -> Plan:
    if frame.array and not s.cut:
        s.glue(frame.end())
    plan = stream_plan(sc, s, speed)
    return _content_type(plan, JSON_TYPE if frame.array else SSE_TYPE)
