"""Rules of OpenAI Chat Completions (and the many gateways that speak it).

A stream is ``chat.completion.chunk`` objects without event names, ended by ``data: [DONE]``;
``finish_reason`` decides the outcome. The usage is a chunk's ``usage``, else Groq's
``x_groq.usage``.
"""

from __future__ import annotations

from typing import Any

from ssetape.analysis.api_rules import ApiRules
from ssetape.analysis.rules.payload import as_dict, as_str, openai_body_head, openai_usage
from ssetape.analysis.tally import Tally
from ssetape.vocabulary import Outcome

__all__ = ["RULES", "chat_delta"]

# finish_reason -> outcome; any other value is taken as a normal stop.
_FINISH = {
    "stop": Outcome.COMPLETED,
    "tool_calls": Outcome.COMPLETED,
    "function_call": Outcome.COMPLETED,
    "length": Outcome.INCOMPLETE,
    "content_filter": Outcome.REFUSED,
    "error": Outcome.ERROR,
}
# Delta keys whose values are the answer (for the timeline's content lane).
_CONTENT_KEYS = ("content", "refusal", "reasoning", "reasoning_content", "tool_calls")


def event(tally: Tally, seq: int, name: str | None, chunk: dict[str, Any]) -> bool:
    # Chat chunks carry no event names, but a failure may come as ``event: error`` with an
    # error object (Groq does; the openai SDK raises on any chunk that holds "error").
    if name is not None and not (name == "error" and tally.profile.chat_error_event):
        tally.unknown(seq, name)
    return chat_chunk(tally, chunk) if chunk else False


def chat_chunk(tally: Tally, chunk: dict[str, Any]) -> bool:
    """One ``chat.completion.chunk``. Only choice 0 is assembled: streams with n > 1 are
    rare and their choices interleave, so one answer is what the fields can describe."""
    if tally.model is None:
        tally.set_model(chunk.get("model"))
    usage = chunk.get("usage")
    # Groq states the usage in its own x_groq.usage (groq-python's XGroq), sometimes there
    # alone: read there when the chunk has no usage of its own.
    openai_usage(tally, usage if usage else as_dict(chunk.get("x_groq")).get("usage"))
    content = False
    finish: object = None
    choices = chunk.get("choices")
    for choice in choices if isinstance(choices, list) else ():
        if not isinstance(choice, dict) or choice.get("index", 0) != 0:
            continue
        content = chat_delta(tally, as_dict(choice.get("delta"))) or content
        finish = choice.get("finish_reason") or finish
    error = chunk.get("error")
    if error is not None or finish == "error":
        # A failure after the stream started: the last chunk, so it is the stream's terminal.
        tally.end(Outcome.ERROR, tally.error_reason(error) or "error", done_ok=True)
    elif isinstance(finish, str) and tally.outcome is None:
        # finish_reason decides the outcome; [DONE] only ends the framing, so a stream that
        # loses it after finish_reason keeps this outcome and gets a no_terminal_event finding.
        tally.outcome = _FINISH.get(finish, Outcome.COMPLETED)
        tally.reason = finish
        _refusal(tally)
    return content


def chat_delta(tally: Tally, delta: dict[str, Any]) -> bool:
    """A delta (or a whole message): text, refusal, reasoning, tool calls."""
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
            elif isinstance(value, list):
                # Mistral (Magistral) sends typed parts: text, and thinking holding text parts.
                content = _parts(tally, value) or content
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
                    slot = _slot(tally, call, position)
                    content = _call(tally, slot, call, as_dict(call.get("function"))) or content
        elif key == "function_call" and isinstance(value, dict):
            content = _call(tally, ("function_call", 0), {}, value) or content
    return content


def _parts(tally: Tally, parts: list[Any]) -> bool:
    """Content sent as a list of typed parts; True when one carried text."""
    content = False
    for part in parts:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind == "text" and isinstance(part.get("text"), str) and part["text"]:
            tally.text.append(part["text"])
            content = True
        elif kind == "thinking":
            thinking = part.get("thinking")
            pieces = thinking if isinstance(thinking, list) else [{"text": thinking}]
            for piece in pieces:
                text = as_dict(piece).get("text")
                if isinstance(text, str) and text:
                    tally.reasoning.append(text)
                    content = True
    return content


def _slot(tally: Tally, call: dict[str, Any], position: int) -> object:
    """The key of a tool call delta. Stream deltas name their call by index; Mistral sends
    each call whole with an id and no index, so the id names it; a message lists calls in
    order (their position)."""
    index = call.get("index")
    if isinstance(index, int) and not isinstance(index, bool):
        return ("tool", index)
    call_id = call.get("id")
    if isinstance(call_id, str) and call_id:
        return ("tool_id", call_id)
    last = next(reversed(tally.tools), None)
    if isinstance(last, tuple) and last[0] == "tool_id":
        return last  # a later piece of the call that named itself by id
    return ("tool", position)


def _call(tally: Tally, key: object, call: dict[str, Any], fn: dict[str, Any]) -> bool:
    entry = tally.tool(key)
    entry.id = entry.id or as_str(call.get("id"))
    entry.name = entry.name or as_str(fn.get("name"))
    args = fn.get("arguments")
    if isinstance(args, str) and args:
        entry.parts.append(args)
        return True
    return False


def _refusal(tally: Tally) -> None:
    # A refusal is the outcome even when finish_reason says stop; an error stays an error.
    if tally.refusal_seen and tally.outcome in (Outcome.COMPLETED, Outcome.INCOMPLETE):
        tally.outcome, tally.reason = Outcome.REFUSED, "refusal"


def done(tally: Tally) -> None:
    """``data: [DONE]``, the chat stream's terminal."""
    tally.closed = tally.finished = True
    if tally.outcome is None:
        # No finish_reason was sent: the stream still ended normally.
        tally.outcome = Outcome.COMPLETED
        _refusal(tally)


def request(tally: Tally, req: dict[str, Any]) -> None:
    options = req.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") is True:
        tally.usage_requested = "stream_options.include_usage"


def body(tally: Tally, obj: dict[str, Any]) -> None:
    if openai_body_head(tally, obj):
        return
    choices = obj.get("choices")
    choice = as_dict(choices[0] if isinstance(choices, list) and choices else {})
    chat_delta(tally, as_dict(choice.get("message")))
    finish = choice.get("finish_reason")
    tally.outcome = Outcome.COMPLETED
    if isinstance(finish, str):
        tally.outcome = _FINISH.get(finish, Outcome.COMPLETED)
    tally.reason = finish if isinstance(finish, str) else None
    _refusal(tally)
    tally.closed = tally.finished = True


def payload_kind(chunk: dict[str, Any]) -> str:
    if chunk.get("error") is not None:
        return "error"
    choices = chunk.get("choices")
    for choice in choices if isinstance(choices, list) else ():
        if not isinstance(choice, dict):
            continue
        if choice.get("finish_reason") == "error":
            return "error"
        delta = choice.get("delta")
        if isinstance(delta, dict) and any(delta.get(key) for key in _CONTENT_KEYS):
            return "content"
    return "meta"


RULES = ApiRules(
    name="chat_completions",
    paths=("/chat/completions",),
    event=event,
    body=body,
    claims_event=lambda _name, obj: isinstance(obj, dict) and "choices" in obj,
    claims_body=lambda obj: "choices" in obj,
    no_terminal="The stream ended without data: [DONE].",
    done=done,
    request=request,
    typed_events=False,
    payload_kind=payload_kind,
)
