"""Rules of the OpenAI Responses API, as the gateway ssetape was first built for states them.

That gateway's "Stream events" document lists every event a stream can send, in order: exactly
one terminal (``response.completed``, ``.failed``, ``.incomplete``, or ``error`` with code
``response_unresolved``) ends it and nothing follows; unknown names are informational. It also
lists "Events that never arrive": declared by the Open Responses schema, never sent by it;
those get a ``never_arrives`` finding.
"""

from __future__ import annotations

from typing import Any

from ssetape.analysis.api_rules import ApiRules
from ssetape.analysis.findings import FindingCode
from ssetape.analysis.rules.payload import as_dict, as_str, openai_body_head
from ssetape.analysis.tally import Tally
from ssetape.vocabulary import Outcome

__all__ = ["NEVER_ARRIVES", "RESPONSES_EVENTS", "RULES"]

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
# "Events that never arrive" (the gateway's stream events document): what to read instead.
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
_TERMINALS = ("response.completed", "response.incomplete", "response.failed")


def event(tally: Tally, seq: int, kind: str | None, ev: dict[str, Any]) -> bool:
    assert kind is not None  # typed events: the analyzer gives the type
    if kind.endswith(".delta"):
        delta = as_str(ev.get("delta"))
        if kind == "response.output_text.delta":
            target = tally.text
        elif kind == "response.refusal.delta":
            target, tally.refusal_seen = tally.refusal, True
        elif kind == "response.reasoning_text.delta":
            target = tally.reasoning
        elif kind == "response.function_call_arguments.delta":
            target = tally.tool(("item", as_str(ev.get("item_id")))).parts
        else:
            return _other(tally, seq, kind)
        if delta:
            target.append(delta)
        return bool(delta)
    if kind in ("response.created", "response.in_progress"):
        tally.set_model(as_dict(ev.get("response")).get("model"))
    elif kind in ("response.output_item.added", "response.output_item.done"):
        item = as_dict(ev.get("item"))
        if item.get("type") == "function_call":
            _function_call(tally, item, done=kind.endswith(".done"))
    elif kind in ("response.content_part.added", "response.content_part.done"):
        if as_dict(ev.get("part")).get("type") == "refusal":
            tally.refusal_seen = True
    elif kind == "response.refusal.done":
        tally.refusal_seen = True
        if not tally.refusal:
            # Deltas are the usual carrier; take the complete text when none streamed.
            tally.refusal.append(as_str(ev.get("refusal")))
    elif kind == "response.function_call_arguments.done":
        entry = tally.tool(("item", as_str(ev.get("item_id"))))
        entry.name = entry.name or as_str(ev.get("name"))
        if isinstance(ev.get("arguments"), str):
            entry.final = ev["arguments"]
    elif kind in _TERMINALS:
        _terminal(tally, kind, as_dict(ev.get("response")))
    elif kind == "error":
        # The error event's fields are top-level; some gateways nest them under "error".
        # At top level "type" is the event's own name, not an error type.
        top = "code" in ev or "message" in ev
        err = {"code": ev.get("code"), "message": ev.get("message")} if top else ev.get("error")
        code = tally.error_reason(err)
        unresolved = code == "response_unresolved"
        tally.end(Outcome.UNRESOLVED if unresolved else Outcome.ERROR, code or "error")
    else:
        _other(tally, seq, kind)
    return False


def _other(tally: Tally, seq: int, kind: str) -> bool:
    if kind in NEVER_ARRIVES:
        detail = f"{kind} never arrives. {NEVER_ARRIVES[kind]}"
        tally.add(FindingCode.NEVER_ARRIVES, seq, detail)
    elif kind not in RESPONSES_EVENTS:
        tally.unknown(seq, kind)
    return False


def _function_call(tally: Tally, item: dict[str, Any], done: bool) -> None:
    # Argument deltas name the item id, so the call is keyed on it; clients answer by call_id.
    entry = tally.tool(("item", as_str(item.get("id"))))
    entry.id = entry.id or as_str(item.get("call_id")) or as_str(item.get("id"))
    entry.name = entry.name or as_str(item.get("name"))
    if done and isinstance(item.get("arguments"), str) and (item["arguments"] or not entry.parts):
        entry.final = item["arguments"]


def _terminal(tally: Tally, kind: str, response: dict[str, Any]) -> None:
    tally.set_model(response.get("model"))
    usage = response.get("usage")
    if isinstance(usage, dict):
        tally.usage(
            usage.get("input_tokens"), usage.get("output_tokens"), usage.get("total_tokens")
        )
    if kind == "response.completed":
        if tally.refusal_seen:
            tally.end(Outcome.REFUSED, "refusal")
        else:
            tally.end(Outcome.COMPLETED, "completed")
    elif kind == "response.incomplete":
        details = as_dict(response.get("incomplete_details"))
        tally.end(Outcome.INCOMPLETE, as_str(details.get("reason")) or "incomplete")
    else:
        # reason is error.code; the message only stands in when there is no code.
        err = as_dict(response.get("error"))
        tally.end(Outcome.ERROR, as_str(err.get("code")) or as_str(err.get("message")) or "failed")


def body(tally: Tally, obj: dict[str, Any]) -> None:
    """A whole ``response`` object."""
    if openai_body_head(tally, obj):
        return
    output = obj.get("output")
    for item in output if isinstance(output, list) else ():
        item = as_dict(item)
        if item.get("type") == "function_call":
            _function_call(tally, item, done=True)
        parts = item.get("content")
        for part in parts if isinstance(parts, list) else ():
            part = as_dict(part)
            if part.get("type") == "output_text":
                tally.text.append(as_str(part.get("text")))
            elif part.get("type") == "refusal":
                tally.refusal.append(as_str(part.get("refusal")))
                tally.refusal_seen = True
            elif part.get("type") == "reasoning_text":
                tally.reasoning.append(as_str(part.get("text")))
    status = as_str(obj.get("status"))
    kind = {"incomplete": "response.incomplete", "failed": "response.failed"}.get(
        status, "response.completed"
    )
    _terminal(tally, kind, obj)
    if tally.outcome == Outcome.COMPLETED and status and status != "completed":
        # A background response fetched before it ended (queued, in_progress, cancelled).
        tally.reason = status


RULES = ApiRules(
    name="responses",
    paths=("/responses",),
    event=event,
    body=body,
    claims_event=lambda kind, _obj: bool(kind) and str(kind).startswith("response."),
    claims_body=lambda obj: obj.get("object") == "response",
    no_terminal="The stream ended without response.completed, .incomplete, .failed or error.",
    terminal_events=frozenset({"response.completed", "response.incomplete"}),
    # response.failed is also a terminal, but that it failed is what a picture has to say.
    error_events=frozenset({"error", "response.failed"}),
)
