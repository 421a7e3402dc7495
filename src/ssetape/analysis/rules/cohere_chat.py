"""Rules of Cohere's v2 Chat API (``POST /v2/chat``), streamed and whole.

The vocabulary is the cohere-python SDK's ``V2ChatStreamResponse`` union (discriminated on
``type``): ``message-start``; ``content-start`` / ``content-delta`` / ``content-end`` (text, or
``thinking`` on reasoning models); ``tool-plan-delta``; ``tool-call-start`` / ``-delta`` /
``-end`` (arguments stream as a JSON string); ``citation-start`` / ``-end``; ``debug``; then
``message-end``, whose ``delta`` holds ``finish_reason``, ``usage`` and, on failure, ``error``.
No event names the model: the request's does.

The tool plan is read as reasoning: the SDK documents it as "a chain-of-thought style
reflection and plan that the model generates when working with Tools", not as the answer.

finish_reason -> outcome, after the SDK's ``ChatFinishReason``: COMPLETE, STOP_SEQUENCE,
TOOL_CALL (and values unknown here) -> completed; MAX_TOKENS -> incomplete; ERROR, TIMEOUT ->
error. The reason is the finish_reason itself.

Usage: ``billed_units`` is read first and ``tokens`` only fills a count it lacks. Cohere's
pricing page says ``tokens`` also counts what Cohere adds under the hood (prompt template,
special tokens) and is not charged; ssetape prices the counts it stores, so they must be the
billed ones. ``cached_tokens`` ("prompt tokens that hit the inference cache") is the cache read.
"""

from __future__ import annotations

from typing import Any

import orjson

from ssetape.analysis.api_rules import ApiRules
from ssetape.analysis.rules.payload import as_dict, as_str
from ssetape.analysis.tally import Tally
from ssetape.vocabulary import Outcome

__all__ = ["COHERE_EVENTS", "FINISH", "RULES"]

COHERE_EVENTS = frozenset(
    {
        "message-start",
        "content-start",
        "content-delta",
        "content-end",
        "tool-plan-delta",
        "tool-call-start",
        "tool-call-delta",
        "tool-call-end",
        "citation-start",
        "citation-end",
        "message-end",
        "debug",
    }
)
FINISH: dict[str, Outcome] = {
    "COMPLETE": Outcome.COMPLETED,
    "STOP_SEQUENCE": Outcome.COMPLETED,
    "TOOL_CALL": Outcome.COMPLETED,
    "MAX_TOKENS": Outcome.INCOMPLETE,
    "ERROR": Outcome.ERROR,
    "TIMEOUT": Outcome.ERROR,
}


def _message(ev: dict[str, Any]) -> dict[str, Any]:
    return as_dict(as_dict(ev.get("delta")).get("message"))


def _call_key(ev: dict[str, Any]) -> tuple[str, int]:
    index = ev.get("index")
    return ("call", index if isinstance(index, int) and not isinstance(index, bool) else -1)


def event(tally: Tally, seq: int, kind: str | None, ev: dict[str, Any]) -> bool:
    if kind == "content-delta":
        return _content(tally, as_dict(_message(ev).get("content")))
    if kind == "tool-plan-delta":
        plan = as_str(_message(ev).get("tool_plan"))
        if plan:
            tally.reasoning.append(plan)
        return bool(plan)
    if kind == "tool-call-delta":
        call = as_dict(_message(ev).get("tool_calls"))
        args = as_str(as_dict(call.get("function")).get("arguments"))
        if args:
            tally.tool(_call_key(ev)).parts.append(args)
        return bool(args)
    if kind == "content-start":
        # Starts normally hold empty values, but a non-empty one is part of the answer.
        return _content(tally, as_dict(_message(ev).get("content")))
    if kind == "tool-call-start":
        call = as_dict(_message(ev).get("tool_calls"))
        entry = tally.tool(_call_key(ev))
        entry.id = entry.id or as_str(call.get("id"))
        function = as_dict(call.get("function"))
        entry.name = entry.name or as_str(function.get("name"))
        args = as_str(function.get("arguments"))
        if args:
            entry.parts.append(args)
        return bool(args)
    if kind == "message-end":
        delta = as_dict(ev.get("delta"))
        _usage(tally, delta.get("usage"))
        finish = delta.get("finish_reason")
        _end(tally, finish if isinstance(finish, str) and finish else None, delta.get("error"))
    elif kind not in COHERE_EVENTS:
        tally.unknown(seq, str(kind))
    return False


def _content(tally: Tally, content: dict[str, Any]) -> bool:
    """One content piece: ``text``, or ``thinking`` (a reasoning model's thoughts)."""
    text, thinking = as_str(content.get("text")), as_str(content.get("thinking"))
    if text:
        tally.text.append(text)
    if thinking:
        tally.reasoning.append(thinking)
    return bool(text or thinking)


def _count(value: object) -> object:
    # The SDK types the counts as floats; a whole float is the count, anything else is left
    # for Tally.usage to ignore.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _usage(tally: Tally, usage: object) -> None:
    if not isinstance(usage, dict):
        return
    billed, tokens = as_dict(usage.get("billed_units")), as_dict(usage.get("tokens"))
    counts = []
    for key in ("input_tokens", "output_tokens"):
        value = _count(billed.get(key))
        counts.append(value if value is not None else _count(tokens.get(key)))
    tally.usage(counts[0], counts[1], None)
    tally.usage_details(cache_read=_count(usage.get("cached_tokens")))


def _end(tally: Tally, finish: str | None, error: object) -> None:
    for entry in tally.tools.values():
        if not "".join(entry.parts) and entry.final is None:
            entry.final = "{}"  # a call without arguments, as the other APIs report it
    if finish is None:
        # No finish reason: an error message still says how it ended.
        outcome = Outcome.ERROR if isinstance(error, str) and error else Outcome.COMPLETED
    else:
        outcome = FINISH.get(finish, Outcome.COMPLETED)
    # The SDK's reader skips a ``[DONE]`` line, so one may follow the terminal.
    tally.end(outcome, finish or ("ERROR" if outcome == Outcome.ERROR else None), done_ok=True)


def body(tally: Tally, obj: dict[str, Any]) -> None:
    """A whole ``V2ChatResponse``."""
    message = as_dict(obj.get("message"))
    items = message.get("content")
    for item in items if isinstance(items, list) else ():
        item = as_dict(item)
        if item.get("type") == "thinking":
            tally.reasoning.append(as_str(item.get("thinking")))
        elif item.get("type") == "text":
            tally.text.append(as_str(item.get("text")))
    # After any thinking, as a stream sends the plan just before its tool calls.
    plan = as_str(message.get("tool_plan"))
    if plan:
        tally.reasoning.append(plan)
    calls = message.get("tool_calls")
    for i, call in enumerate(calls if isinstance(calls, list) else ()):
        call = as_dict(call)
        function = as_dict(call.get("function"))
        entry = tally.tool(("call", i))
        entry.id, entry.name = as_str(call.get("id")), as_str(function.get("name"))
        args = function.get("arguments")
        entry.final = args if isinstance(args, str) else orjson.dumps(args or {}).decode()
    _usage(tally, obj.get("usage"))
    finish = obj.get("finish_reason")
    _end(tally, finish if isinstance(finish, str) and finish else None, None)


_CONTENT = frozenset({"content-delta", "tool-plan-delta", "tool-call-delta"})


def _claims_body(obj: dict[str, Any]) -> bool:
    return (
        isinstance(obj.get("finish_reason"), str)
        and isinstance(obj.get("message"), dict)
        and "choices" not in obj
    )


RULES = ApiRules(
    name="cohere_chat",
    paths=("/v2/chat",),
    event=event,
    body=body,
    # message-start is the first event and its hyphenated name is Cohere's alone.
    claims_event=lambda kind, _obj: kind == "message-start",
    claims_body=_claims_body,
    no_terminal="The stream ended without message-end.",
    done=lambda _tally: None,  # the SDK skips it; it says nothing of how the stream ended
    terminal_events=frozenset({"message-end"}),
    content_events=_CONTENT,
    vendor="cohere",
)
