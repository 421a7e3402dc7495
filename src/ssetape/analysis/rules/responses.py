"""Rules of the OpenAI Responses API, under the profile of the exchange's provider.

A stream is typed events ending in one terminal: ``response.completed``, ``.failed``,
``.incomplete``, or ``error``. What else a provider sends differs (see
:mod:`ssetape.analysis.profiles`): OpenAI's vocabulary is its SDK's ``ResponseStreamEvent``
union and it follows ``error`` with ``response.failed``; the seed gateway's is the list of its
"Stream events" document, its ``error`` (code ``response_unresolved``) is the terminal, and
the events it says never arrive get a ``never_arrives`` finding. Unknown names are
informational: one ``unknown_event`` finding each.
"""

from __future__ import annotations

from typing import Any

from ssetape.analysis.api_rules import ApiRules
from ssetape.analysis.findings import FindingCode
from ssetape.analysis.profiles import SEED_NEVER_SENT
from ssetape.analysis.rules.payload import as_dict, as_str, openai_body_head, openai_usage
from ssetape.analysis.tally import Tally
from ssetape.vocabulary import Outcome

__all__ = ["NEVER_ARRIVES", "RULES"]

# The seed gateway's, under the name its tests import.
NEVER_ARRIVES = SEED_NEVER_SENT
# Deltas of what the model writes besides text, refusal, reasoning and function arguments:
# tool input and audio. They are output, so they count for TTFT and the gaps.
_OUTPUT_DELTAS = frozenset(
    {
        "response.mcp_call_arguments.delta",
        "response.code_interpreter_call_code.delta",
        "response.custom_tool_call_input.delta",
        "response.audio.delta",
        "response.audio.transcript.delta",
    }
)
_TERMINALS = ("response.completed", "response.incomplete", "response.failed")


def event(tally: Tally, seq: int, kind: str | None, ev: dict[str, Any]) -> bool:
    assert kind is not None  # typed events: the analyzer gives the type
    never = tally.profile.never_sent.get(kind)
    if never is not None:
        # Said never to come, yet here: flagged, and still read for what it carries.
        tally.add(FindingCode.NEVER_ARRIVES, seq, f"{kind} never arrives. {never}")
    if kind.endswith(".delta"):
        delta = as_str(ev.get("delta"))
        if kind == "response.output_text.delta":
            target = tally.text
        elif kind == "response.refusal.delta":
            target, tally.refusal_seen = tally.refusal, True
        elif kind in ("response.reasoning_text.delta", "response.reasoning_summary_text.delta"):
            # A summary is the reasoning a client is shown: what OpenAI streams instead.
            target = tally.reasoning
        elif kind == "response.function_call_arguments.delta":
            target = tally.tool(("item", as_str(ev.get("item_id")))).parts
        else:
            _other(tally, seq, kind, never is not None)
            return bool(delta) and kind in _OUTPUT_DELTAS
        if delta:
            target.append(delta)
        return bool(delta)
    if kind in ("response.created", "response.in_progress", "response.queued"):
        tally.set_model(as_dict(ev.get("response")).get("model"))
    elif kind == "response.reasoning_summary_part.added":
        if tally.reasoning:
            tally.reasoning.append("\n\n")  # summary parts are paragraphs
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
        _end(tally, Outcome.UNRESOLVED if unresolved else Outcome.ERROR, code or "error")
        if tally.profile.error_then_failed:
            tally.follow = frozenset({"response.failed"})
    else:
        _other(tally, seq, kind, never is not None)
    return False


def _other(tally: Tally, seq: int, kind: str, flagged: bool) -> None:
    if not flagged and kind not in tally.profile.responses_events:
        tally.unknown(seq, kind)


def _end(tally: Tally, outcome: str, reason: str) -> None:
    # A provider that closes its Responses streams with [DONE] (OpenRouter) may send one more.
    tally.end(outcome, reason, done_ok=tally.profile.responses_done)


def _function_call(tally: Tally, item: dict[str, Any], done: bool) -> None:
    # Argument deltas name the item id, so the call is keyed on it; clients answer by call_id.
    entry = tally.tool(("item", as_str(item.get("id"))))
    entry.id = entry.id or as_str(item.get("call_id")) or as_str(item.get("id"))
    entry.name = entry.name or as_str(item.get("name"))
    if done and isinstance(item.get("arguments"), str) and (item["arguments"] or not entry.parts):
        entry.final = item["arguments"]


def _terminal(tally: Tally, kind: str, response: dict[str, Any]) -> None:
    tally.set_model(response.get("model"))
    openai_usage(tally, response.get("usage"))
    if kind == "response.completed":
        if tally.refusal_seen:
            _end(tally, Outcome.REFUSED, "refusal")
        else:
            _end(tally, Outcome.COMPLETED, "completed")
    elif kind == "response.incomplete":
        details = as_dict(response.get("incomplete_details"))
        _end(tally, Outcome.INCOMPLETE, as_str(details.get("reason")) or "incomplete")
    else:
        # reason is error.code; the message only stands in when there is no code.
        err = as_dict(response.get("error"))
        _end(
            tally, Outcome.ERROR, as_str(err.get("code")) or as_str(err.get("message")) or "failed"
        )


def body(tally: Tally, obj: dict[str, Any]) -> None:
    """A whole ``response`` object."""
    if openai_body_head(tally, obj):
        return
    output = obj.get("output")
    for item in output if isinstance(output, list) else ():
        item = as_dict(item)
        if item.get("type") == "function_call":
            _function_call(tally, item, done=True)
        elif item.get("type") == "reasoning" and not item.get("content"):
            summary = item.get("summary")
            texts = (
                [as_str(as_dict(p).get("text")) for p in summary]
                if isinstance(summary, list)
                else []
            )
            tally.reasoning.append("\n\n".join(t for t in texts if t))
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
