"""Rules of Google's Interactions API (``POST /v1beta/interactions`` on
generativelanguage.googleapis.com), streamed and whole.

Every event's payload names its type in ``event_type`` (and the SSE ``event:`` line repeats
it), after the google-genai SDK's ``InteractionSSEEvent`` union. Two vocabularies are read:

* steps (the SDK since May 2026): ``interaction.created``, ``interaction.status_update``,
  ``step.start`` / ``step.delta`` / ``step.stop``, then ``interaction.completed`` or ``error``;
* content (the earlier one, "used when steps are disabled"): ``interaction.start``,
  ``content.start`` / ``content.delta`` / ``content.stop``, then ``interaction.complete``.

Deltas: ``text`` is the answer; ``thought_summary`` (its ``content.text``) the reasoning;
``arguments_delta`` streams a function call's arguments as a JSON string (the call's id and
name are in its ``step.start``); the earlier vocabulary sends a ``function_call`` whole.
Calls of tools the server runs itself (Google Search, code execution, MCP servers, ...) are the
model's output but no call for the client; their results are not the model's output.

The terminal's ``interaction.status`` -> outcome: completed, and requires_action (function
calls await their results) -> completed; incomplete, budget_exceeded -> incomplete; failed ->
error; cancelled -> aborted (the client ended it); other values -> completed. The reason is
the status. An ``error`` event is an error labelled by its ``error.code``, else its message.
The stream then ends with ``event: done`` / ``data: [DONE]``, which is no event of the API
(google-genai's stream stops reading at it): after the terminal it is read as the stream's
end; without a terminal it says nothing of how the interaction ended.

Usage (``interaction.usage``, a running ``usage`` in ``step.stop``, ``metadata.total_usage``):
the API's counts read as Gemini's do, so ``total_output_tokens`` leaves the thinking out and
output_tokens adds ``total_thought_tokens`` back, as :mod:`ssetape.analysis.rules.gemini`
does; ``total_cached_tokens`` is the cache read, Google Search's ``grounding_tool_count`` the
web searches.
"""

from __future__ import annotations

from typing import Any

import orjson

from ssetape.analysis.api_rules import ApiRules
from ssetape.analysis.findings import FindingCode
from ssetape.analysis.rules.gemini import error_reason
from ssetape.analysis.rules.payload import as_dict, as_str
from ssetape.analysis.tally import Tally, as_count
from ssetape.vocabulary import Outcome

__all__ = ["INTERACTIONS_EVENTS", "RULES", "STATUS"]

_STARTS = frozenset({"interaction.created", "interaction.start"})
_TERMINALS = frozenset({"interaction.completed", "interaction.complete"})
INTERACTIONS_EVENTS = frozenset(
    {
        *_STARTS,
        *_TERMINALS,
        "interaction.status_update",
        "step.start",
        "step.delta",
        "step.stop",
        "content.start",
        "content.delta",
        "content.stop",
        "error",
    }
)
STATUS: dict[str, Outcome] = {
    "completed": Outcome.COMPLETED,
    "requires_action": Outcome.COMPLETED,
    "incomplete": Outcome.INCOMPLETE,
    "budget_exceeded": Outcome.INCOMPLETE,
    "failed": Outcome.ERROR,
    "cancelled": Outcome.ABORTED,
}
# Delta types that are the model's output besides text, reasoning and arguments: media, and
# the calls of tools the server runs. Results, signatures and annotations are not.
_MEDIA = frozenset({"image", "audio", "video", "document"})
_QUIET = frozenset({"thought_signature", "text_annotation_delta"})


def event(tally: Tally, seq: int, name: str | None, ev: dict[str, Any]) -> bool:
    kind = name or ev.get("event_type")
    if not isinstance(kind, str) or not kind:
        detail = "The event has neither a name nor an event_type."
        tally.add(FindingCode.UNKNOWN_EVENT, seq, detail)
        return False
    _usage(tally, as_dict(ev.get("metadata")).get("total_usage"))
    if kind in ("step.delta", "content.delta"):
        return _delta(tally, seq, kind, _key(ev), as_dict(ev.get("delta")))
    if kind == "step.start":
        return _item(tally, _key(ev), as_dict(ev.get("step")))
    if kind == "content.start":
        return _item(tally, _key(ev), as_dict(ev.get("content")))
    if kind == "step.stop":
        _usage(tally, ev.get("usage"))
    elif kind in _STARTS:
        interaction = as_dict(ev.get("interaction"))
        tally.set_model(interaction.get("model"))
        _usage(tally, interaction.get("usage"))
    elif kind in _TERMINALS:
        _terminal(tally, as_dict(ev.get("interaction")))
    elif kind == "error":
        err = as_dict(ev.get("error"))
        reason = as_str(err.get("code")) or as_str(err.get("message")) or "error"
        tally.end(Outcome.ERROR, reason, done_ok=True)
    elif kind not in INTERACTIONS_EVENTS:
        tally.unknown(seq, kind)
    return False


def _key(ev: dict[str, Any]) -> tuple[str, int]:
    index = ev.get("index")
    return ("step", index if isinstance(index, int) and not isinstance(index, bool) else -1)


def _delta(tally: Tally, seq: int, kind: str, key: tuple[str, int], delta: dict[str, Any]) -> bool:
    dtype = as_str(delta.get("type"))
    if dtype == "text":
        text = as_str(delta.get("text"))
        if text:
            tally.text.append(text)
        return bool(text)
    if dtype == "thought_summary":
        summary = as_str(as_dict(delta.get("content")).get("text"))
        if summary:
            tally.reasoning.append(summary)
        return bool(summary)
    if dtype == "arguments_delta":
        args = as_str(delta.get("arguments"))
        if args:
            tally.tool(key).parts.append(args)
        return bool(args)
    if dtype == "function_call":  # the content vocabulary: a whole call
        _call(tally, key, delta)
        return True
    if dtype in _MEDIA:
        return bool(delta.get("data") or delta.get("uri"))
    if dtype.endswith("_call"):
        return True  # a server tool's call: the model wrote it
    if dtype not in _QUIET and not dtype.endswith("_result"):
        tally.unknown(seq, f"{kind} {dtype or '(no type)'}")
    return False


def _item(tally: Tally, key: tuple[str, int], item: dict[str, Any]) -> bool:
    """A step (or, in the content vocabulary, a content block) as it starts or as a whole
    answer lists it; True when it carried output."""
    kind = item.get("type")
    found: list[str] = []
    if kind == "text":
        found.append(as_str(item.get("text")))
        tally.text.append(found[-1])
    elif kind == "model_output":
        parts = item.get("content")
        for part in parts if isinstance(parts, list) else ():
            if as_dict(part).get("type") == "text":
                found.append(as_str(as_dict(part).get("text")))
                tally.text.append(found[-1])
    elif kind == "thought":
        summary = item.get("summary")
        for part in summary if isinstance(summary, list) else ():
            if as_dict(part).get("type") == "text":
                found.append(as_str(as_dict(part).get("text")))
                tally.reasoning.append(found[-1])
    elif kind == "function_call":
        _call(tally, key, item)
        args = item.get("arguments")
        return isinstance(args, dict) and bool(args)
    return any(found)


def _call(tally: Tally, key: tuple[str, int], call: dict[str, Any]) -> None:
    entry = tally.tool(key)
    entry.id = entry.id or as_str(call.get("id"))
    entry.name = entry.name or as_str(call.get("name"))
    args = call.get("arguments")
    if isinstance(args, dict) and args:
        entry.final = orjson.dumps(args).decode()


def _usage(tally: Tally, usage: object) -> None:
    if not isinstance(usage, dict):
        return
    out = as_count(usage.get("total_output_tokens"))
    thought = as_count(usage.get("total_thought_tokens"))
    output = None if out is None and thought is None else (out or 0) + (thought or 0)
    # Input with what tool use added (total_tool_use_tokens, reported apart), as billed.
    inp, tool_use = (
        as_count(usage.get("total_input_tokens")),
        as_count(usage.get("total_tool_use_tokens")),
    )
    inp = inp if tool_use is None or inp is None else inp + tool_use
    tally.usage(inp, output, usage.get("total_tokens"))
    searches = None
    grounding = usage.get("grounding_tool_count")
    for tool in grounding if isinstance(grounding, list) else ():
        if as_dict(tool).get("type") == "google_search":
            searches = as_count(as_dict(tool).get("count"), searches)
    tally.usage_details(
        cache_read=usage.get("total_cached_tokens"),
        reasoning=usage.get("total_thought_tokens"),
        web_searches=searches,
    )


def _terminal(tally: Tally, interaction: dict[str, Any]) -> None:
    tally.set_model(interaction.get("model"))
    _usage(tally, interaction.get("usage"))
    for entry in tally.tools.values():
        # Streamed arguments win over the start's; a call without any is "{}".
        if "".join(entry.parts):
            entry.final = None
        elif entry.final is None:
            entry.final = "{}"
    status = as_str(interaction.get("status"))
    tally.end(STATUS.get(status, Outcome.COMPLETED), status or None, done_ok=True)


def body(tally: Tally, obj: dict[str, Any]) -> None:
    """A whole ``Interaction``, or an error object sent with HTTP 200."""
    if obj.get("error") is not None and "status" not in obj:
        tally.end(Outcome.ERROR, error_reason(obj.get("error")))
        return
    steps = obj.get("steps")
    if not isinstance(steps, list):
        steps = obj.get("outputs")  # the content vocabulary's answer
    for i, item in enumerate(steps if isinstance(steps, list) else ()):
        _item(tally, ("step", i), as_dict(item))
    _terminal(tally, obj)


def payload_kind(obj: dict[str, Any]) -> str:
    kind = obj.get("event_type")
    if kind == "error":
        return "error"
    if kind in _TERMINALS:
        status = as_str(as_dict(obj.get("interaction")).get("status"))
        return "error" if STATUS.get(status) == Outcome.ERROR else "terminal"
    return "content" if kind in ("step.delta", "content.delta") else "meta"


def _claims_event(kind: str | None, obj: object) -> bool:
    # "error" alone could be any API's; event_type is this API's own key.
    if kind is not None and kind != "error" and kind in INTERACTIONS_EVENTS:
        return True
    return isinstance(obj, dict) and obj.get("event_type") in INTERACTIONS_EVENTS


RULES = ApiRules(
    name="interactions",
    paths=("/interactions",),
    event=event,
    body=body,
    claims_event=_claims_event,
    claims_body=lambda obj: obj.get("object") == "interaction",
    no_terminal="The stream ended without interaction.completed or error.",
    done=lambda _tally: None,
    # The type is the payload's event_type, not "type": the rules read it themselves, so a
    # stream whose event: lines a gateway dropped is still read.
    typed_events=False,
    terminal_events=_TERMINALS,
    error_events=frozenset({"error"}),
    payload_kind=payload_kind,
    error_reason=error_reason,
    vendor="google",
)
