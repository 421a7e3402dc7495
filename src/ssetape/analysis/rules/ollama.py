"""Rules of Ollama's native API (``/api/chat``, ``/api/generate``), streamed and whole.

A stream is NDJSON (:mod:`ssetape.framing.ndjson`): one object per line with ``model``,
``created_at`` and ``done``; ``/api/chat`` lines hold a ``message`` (``content``, ``thinking``,
``tool_calls``), ``/api/generate`` lines a ``response`` (and ``thinking``). The last line has
``done: true``, the ``done_reason`` and the counts (``prompt_eval_count`` input,
``eval_count`` output). A failure is a line ``{"error": "..."}`` (Ollama's docs/api.md).
"""

from __future__ import annotations

from typing import Any

import orjson

from ssetape.analysis.api_rules import ApiRules
from ssetape.analysis.rules.payload import as_dict, as_str
from ssetape.analysis.tally import Tally
from ssetape.vocabulary import Outcome

__all__ = ["RULES"]

# done_reason -> outcome; "stop" and the others ("load", "unload") ended normally.
_DONE = {"length": Outcome.INCOMPLETE}


def event(tally: Tally, seq: int, _kind: str | None, obj: dict[str, Any]) -> bool:
    if "error" in obj:
        tally.end(Outcome.ERROR, Tally.error_reason(obj.get("error")) or "error")
        return False
    tally.set_model(obj.get("model"))
    message = as_dict(obj.get("message"))
    content = False
    if text := as_str(message.get("content")) or as_str(obj.get("response")):
        tally.text.append(text)
        content = True
    if thought := as_str(message.get("thinking")) or as_str(obj.get("thinking")):
        tally.reasoning.append(thought)
        content = True
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        function = as_dict(as_dict(call).get("function"))
        entry = tally.tool(("call", len(tally.tools)))
        entry.id, entry.name = as_str(as_dict(call).get("id")), as_str(function.get("name"))
        arguments = function.get("arguments", {})
        entry.final = arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()
        content = True
    if obj.get("done") is True:
        tally.usage(obj.get("prompt_eval_count"), obj.get("eval_count"), None)
        reason = as_str(obj.get("done_reason")) or None
        tally.end(_DONE.get(reason or "", Outcome.COMPLETED), reason)
    return content


def body(tally: Tally, obj: dict[str, Any]) -> None:
    """A whole answer (``"stream": false``): the stream's last line with all the content."""
    event(tally, 0, None, obj)


def _claims(obj: object) -> bool:
    return isinstance(obj, dict) and isinstance(obj.get("done"), bool) and "created_at" in obj


def _kind(obj: dict[str, Any]) -> str:
    return "error" if "error" in obj else "done" if obj.get("done") is True else "chunk"


RULES = ApiRules(
    name="ollama",
    paths=("/api/chat", "/api/generate"),
    event=event,
    body=body,
    claims_event=lambda _kind, obj: _claims(obj),
    claims_body=_claims,
    no_terminal="The stream ended without its done line or an error.",
    typed_events=False,
    payload_kind=lambda obj: (
        "done" if obj.get("done") is True else "error" if "error" in obj else "chunk"
    ),
    terminal_events=frozenset({"done"}),
    error_events=frozenset({"error"}),
    content_events=frozenset({"chunk"}),
)
