"""Analysis rules for the OpenAI-style APIs: Chat Completions, Responses and Images.

Each function reads one parsed event (or a whole non-streamed body) into a
:class:`~ssetape.analysis.tally.Tally` and returns whether the event carried content, which is
what TTFT and the inter-token gaps are measured on. Payloads come from the network, so
every field is type-checked before use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ssetape.analysis.tally import Tally

__all__ = [
    "NEVER_ARRIVES",
    "RESPONSES_EVENTS",
    "body",
    "chat_chunk",
    "chat_done",
    "images_done",
    "images_event",
    "responses_event",
]

# Chat finish_reason -> outcome; any other value is taken as a normal stop.
_FINISH = {
    "stop": "completed",
    "tool_calls": "completed",
    "function_call": "completed",
    "length": "incomplete",
    "content_filter": "refused",
    "error": "error",
}
# fmt: off
RESPONSES_EVENTS = frozenset({
    "response.created", "response.in_progress", "response.output_item.added",
    "response.content_part.added", "response.output_text.delta", "response.output_text.done",
    "response.refusal.delta", "response.refusal.done", "response.function_call_arguments.delta",
    "response.function_call_arguments.done", "response.reasoning_text.delta",
    "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
    "response.completed", "response.failed", "response.incomplete", "error",
})
# fmt: on
# Seed 001, "Events that never arrive": declared by the Open Responses schema, never sent here.
NEVER_ARRIVES = {
    "response.queued": "Streams open with response.created and response.in_progress; "
    "read response.created as the start.",
    "response.output_text.annotation.added": "Output text is not annotated here; "
    "annotations on a text part is always empty.",
    "response.reasoning_summary_part.added": "Reasoning is not summarized; "
    "the reasoning item opens with response.output_item.added.",
    "response.reasoning_summary_part.done": "Reasoning is not summarized; "
    "the reasoning item closes with response.output_item.done.",
    "response.reasoning_summary_text.delta": "Reasoning is not summarized; "
    "the reasoning streams on response.reasoning_text.delta.",
    "response.reasoning_summary_text.done": "Reasoning is not summarized; "
    "the complete reasoning arrives on response.reasoning_text.done.",
}
_IMAGES_EVENTS = frozenset(
    {"image_generation.partial_image", "image_generation.completed", "error"}
)


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


# Chat Completions ---------------------------------------------------------------------------


def chat_chunk(tally: Tally, seq: int, chunk: dict[str, Any]) -> bool:
    """One ``chat.completion.chunk``. Only choice 0 is assembled: streams with n > 1 are
    rare and their choices interleave, so one answer is what the fields can describe."""
    if tally.model is None:
        tally.set_model(chunk.get("model"))
    usage = chunk.get("usage")
    if isinstance(usage, dict):
        tally.usage(
            usage.get("prompt_tokens"), usage.get("completion_tokens"), usage.get("total_tokens")
        )
    content = False
    finish: object = None
    choices = chunk.get("choices")
    for choice in choices if isinstance(choices, list) else ():
        if not isinstance(choice, dict) or choice.get("index", 0) != 0:
            continue
        content = _chat_delta(tally, _dict(choice.get("delta"))) or content
        finish = choice.get("finish_reason") or finish
    error = chunk.get("error")
    if error is not None or finish == "error":
        # A failure after the stream started: the last chunk, so it is the stream's terminal.
        tally.end("error", tally.error_reason(error) or "error", done_ok=True)
    elif isinstance(finish, str) and tally.outcome is None:
        # finish_reason decides the outcome; [DONE] only ends the framing, so a stream that
        # loses it after finish_reason keeps this outcome and gets a no_terminal_event finding.
        tally.outcome = _FINISH.get(finish, "completed")
        tally.reason = finish
        _chat_refusal(tally)
    return content


def _chat_delta(tally: Tally, delta: dict[str, Any]) -> bool:
    content = False
    # One pass over the delta's (usually one or two) keys is cheaper than a lookup per field,
    # and this runs once per event.
    for key, value in delta.items():
        if not value:
            continue
        if key == "content":
            if isinstance(value, str):
                tally.text.append(value)
                content = True
        elif key == "refusal":
            if isinstance(value, str):
                tally.refusal.append(value)
                tally.refusal_seen = content = True
        elif key in ("reasoning", "reasoning_content"):
            # OpenRouter and DeepSeek-style gateways stream reasoning beside the content.
            if isinstance(value, str):
                tally.reasoning.append(value)
                content = True
        elif key == "tool_calls":
            for position, call in enumerate(value if isinstance(value, list) else ()):
                if isinstance(call, dict):
                    # Stream deltas name their call by index; a message lists calls in order.
                    index = call.get("index", position)
                    slot = ("tool", index if isinstance(index, int) else position)
                    content = _chat_call(tally, slot, call, _dict(call.get("function"))) or content
        elif key == "function_call" and isinstance(value, dict):
            content = _chat_call(tally, ("function_call", 0), {}, value) or content
    return content


def _chat_call(tally: Tally, key: object, call: dict[str, Any], fn: dict[str, Any]) -> bool:
    entry = tally.tool(key)
    entry.id = entry.id or _str(call.get("id"))
    entry.name = entry.name or _str(fn.get("name"))
    args = fn.get("arguments")
    if isinstance(args, str) and args:
        entry.parts.append(args)
        return True
    return False


def _chat_refusal(tally: Tally) -> None:
    # A refusal is the outcome even when finish_reason says stop; an error stays an error.
    if tally.refusal_seen and tally.outcome in ("completed", "incomplete"):
        tally.outcome, tally.reason = "refused", "refusal"


def chat_done(tally: Tally) -> None:
    """``data: [DONE]``, the chat stream's terminal."""
    tally.closed = tally.finished = True
    if tally.outcome is None:
        # No finish_reason was sent: the stream still ended normally.
        tally.outcome = "completed"
        _chat_refusal(tally)


# Responses ----------------------------------------------------------------------------------


def responses_event(tally: Tally, seq: int, kind: str, ev: dict[str, Any]) -> bool:
    if kind.endswith(".delta"):
        delta = _str(ev.get("delta"))
        if kind == "response.output_text.delta":
            target = tally.text
        elif kind == "response.refusal.delta":
            target, tally.refusal_seen = tally.refusal, True
        elif kind == "response.reasoning_text.delta":
            target = tally.reasoning
        elif kind == "response.function_call_arguments.delta":
            target = tally.tool(("item", _str(ev.get("item_id")))).parts
        else:
            return _responses_other(tally, seq, kind)
        if delta:
            target.append(delta)
        return bool(delta)
    if kind in ("response.created", "response.in_progress"):
        tally.set_model(_dict(ev.get("response")).get("model"))
    elif kind in ("response.output_item.added", "response.output_item.done"):
        item = _dict(ev.get("item"))
        if item.get("type") == "function_call":
            _function_call(tally, item, done=kind.endswith(".done"))
    elif kind in ("response.content_part.added", "response.content_part.done"):
        if _dict(ev.get("part")).get("type") == "refusal":
            tally.refusal_seen = True
    elif kind == "response.refusal.done":
        tally.refusal_seen = True
        if not tally.refusal:
            # Deltas are the usual carrier; take the complete text when none streamed.
            tally.refusal.append(_str(ev.get("refusal")))
    elif kind == "response.function_call_arguments.done":
        entry = tally.tool(("item", _str(ev.get("item_id"))))
        entry.name = entry.name or _str(ev.get("name"))
        if isinstance(ev.get("arguments"), str):
            entry.final = ev["arguments"]
    elif kind in ("response.completed", "response.incomplete", "response.failed"):
        _response_terminal(tally, kind, _dict(ev.get("response")))
    elif kind == "error":
        # The error event's fields are top-level; some gateways nest them under "error".
        # At top level "type" is the event's own name, not an error type.
        top = "code" in ev or "message" in ev
        err = {"code": ev.get("code"), "message": ev.get("message")} if top else ev.get("error")
        code = tally.error_reason(err)
        tally.end("unresolved" if code == "response_unresolved" else "error", code or "error")
    else:
        _responses_other(tally, seq, kind)
    return False


def _responses_other(tally: Tally, seq: int, kind: str) -> bool:
    if kind in NEVER_ARRIVES:
        tally.add("never_arrives", seq, f"{kind} never arrives. {NEVER_ARRIVES[kind]}")
    elif kind not in RESPONSES_EVENTS:
        tally.unknown(seq, kind)
    return False


def _function_call(tally: Tally, item: dict[str, Any], done: bool) -> None:
    # Argument deltas name the item id, so the call is keyed on it; clients answer by call_id.
    entry = tally.tool(("item", _str(item.get("id"))))
    entry.id = entry.id or _str(item.get("call_id")) or _str(item.get("id"))
    entry.name = entry.name or _str(item.get("name"))
    if done and isinstance(item.get("arguments"), str) and (item["arguments"] or not entry.parts):
        entry.final = item["arguments"]


def _response_terminal(tally: Tally, kind: str, response: dict[str, Any]) -> None:
    tally.set_model(response.get("model"))
    usage = response.get("usage")
    if isinstance(usage, dict):
        tally.usage(
            usage.get("input_tokens"), usage.get("output_tokens"), usage.get("total_tokens")
        )
    if kind == "response.completed":
        if tally.refusal_seen:
            tally.end("refused", "refusal")
        else:
            tally.end("completed", "completed")
    elif kind == "response.incomplete":
        details = _dict(response.get("incomplete_details"))
        tally.end("incomplete", _str(details.get("reason")) or "incomplete")
    else:
        # reason is error.code; the message only stands in when there is no code.
        err = _dict(response.get("error"))
        reason = _str(err.get("code")) or _str(err.get("message")) or "failed"
        tally.end("error", reason)


# Images -------------------------------------------------------------------------------------


def images_event(tally: Tally, seq: int, kind: str, ev: dict[str, Any]) -> bool:
    if kind == "image_generation.partial_image":
        return True
    if kind == "image_generation.completed":
        usage = ev.get("usage")
        if isinstance(usage, dict):
            tally.usage(
                usage.get("input_tokens"), usage.get("output_tokens"), usage.get("total_tokens")
            )
        # data: [DONE] still has to follow.
        tally.end("completed", "completed", finished=False, done_ok=True)
    elif kind == "error":
        tally.end("error", tally.error_reason(ev.get("error")) or "error", done_ok=True)
    elif kind not in _IMAGES_EVENTS:
        tally.unknown(seq, kind)
    return False


def images_done(tally: Tally) -> None:
    """``data: [DONE]`` before any completed or error event: over, but without an outcome."""
    tally.closed = True


# Non-streamed bodies ------------------------------------------------------------------------


def body(tally: Tally, obj: dict[str, Any]) -> None:
    """A whole JSON answer of an OpenAI-style API, or an error object sent with HTTP 200."""
    tally.set_model(obj.get("model"))
    usage = obj.get("usage")
    if isinstance(usage, dict):
        inp = usage.get("input_tokens", usage.get("prompt_tokens"))
        out = usage.get("output_tokens", usage.get("completion_tokens"))
        tally.usage(inp, out, usage.get("total_tokens"))
    if obj.get("error") is not None and not isinstance(obj.get("status"), str):
        tally.end("error", tally.error_reason(obj.get("error")) or "error")
    elif tally.api == "chat_completions":
        _chat_body(tally, obj)
    elif tally.api == "responses":
        _responses_body(tally, obj)
    elif tally.api == "images":
        tally.end("completed", "completed")


def _chat_body(tally: Tally, obj: dict[str, Any]) -> None:
    choices = obj.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else {}
    choice = _dict(choice)
    message = _dict(choice.get("message"))
    _chat_delta(tally, message)
    finish = choice.get("finish_reason")
    tally.outcome = _FINISH.get(finish, "completed") if isinstance(finish, str) else "completed"
    tally.reason = finish if isinstance(finish, str) else None
    _chat_refusal(tally)
    tally.closed = tally.finished = True


def _responses_body(tally: Tally, obj: dict[str, Any]) -> None:
    output = obj.get("output")
    for item in output if isinstance(output, list) else ():
        item = _dict(item)
        kind = item.get("type")
        if kind == "function_call":
            _function_call(tally, item, done=True)
        parts = item.get("content")
        for part in parts if isinstance(parts, list) else ():
            part = _dict(part)
            if part.get("type") == "output_text":
                tally.text.append(_str(part.get("text")))
            elif part.get("type") == "refusal":
                tally.refusal.append(_str(part.get("refusal")))
                tally.refusal_seen = True
            elif part.get("type") == "reasoning_text":
                tally.reasoning.append(_str(part.get("text")))
    status = _str(obj.get("status"))
    kind = {"incomplete": "response.incomplete", "failed": "response.failed"}.get(
        status, "response.completed"
    )
    _response_terminal(tally, kind, obj)
    if tally.outcome == "completed" and status and status != "completed":
        # A background response fetched before it ended (queued, in_progress, cancelled).
        tally.reason = status
