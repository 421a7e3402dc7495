"""Rules of Amazon Bedrock's Converse API (``/model/{modelId}/converse-stream``), streamed and
whole.

A stream is AWS event-stream frames (:mod:`ssetape.framing.eventstream`), each named by its
``:event-type``: ``messageStart``, content blocks (``contentBlockStart`` for tool use,
``contentBlockDelta`` with text, reasoning or tool input, ``contentBlockStop``),
``messageStop`` with the stop reason, then ``metadata`` with usage. A failure mid-stream is an
exception frame (``throttlingException``, ``modelStreamErrorException``, ...). The model is
named only by the request path (AWS API reference, ConverseStream and ConverseStreamOutput).
Amazon Nova's InvokeModelWithResponseStream chunks carry the same events, one per chunk
(:mod:`ssetape.analysis.rules.bedrock_invoke`).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote

import orjson

from ssetape.analysis.api_rules import ApiRules
from ssetape.analysis.rules.payload import as_dict, as_str
from ssetape.analysis.tally import Tally
from ssetape.vocabulary import Outcome

__all__ = ["CONVERSE_EVENTS", "RULES", "converse_event", "model_of_path"]

CONVERSE_EVENTS = frozenset(
    {
        "messageStart",
        "contentBlockStart",
        "contentBlockDelta",
        "contentBlockStop",
        "messageStop",
        "metadata",
    }
)
# MessageStopEvent.stopReason -> outcome; an unknown one still ended the message normally.
_STOP = {
    "end_turn": Outcome.COMPLETED,
    "tool_use": Outcome.COMPLETED,
    "stop_sequence": Outcome.COMPLETED,
    "max_tokens": Outcome.INCOMPLETE,
    "model_context_window_exceeded": Outcome.INCOMPLETE,
    "guardrail_intervened": Outcome.REFUSED,
    "content_filtered": Outcome.REFUSED,
    "malformed_model_output": Outcome.ERROR,
    "malformed_tool_use": Outcome.ERROR,
}
_MODEL_IN_PATH = re.compile(r"/model/([^/]+)/(?:converse|invoke)")


def model_of_path(path: str) -> str | None:
    """The model id (or ARN) a Bedrock request path names, URL-decoded."""
    found = _MODEL_IN_PATH.search(path.split("?", 1)[0])
    return unquote(found.group(1)) if found else None


def _is_exception(kind: str | None) -> bool:
    # The stream's exception frames, as AWS names them (``:exception-type``).
    return bool(kind) and str(kind).endswith("Exception")


def _block(ev: dict[str, Any]) -> tuple[str, int]:
    index = ev.get("contentBlockIndex")
    return ("block", index if isinstance(index, int) else -1)


def converse_event(tally: Tally, seq: int, kind: str | None, ev: dict[str, Any]) -> bool:
    """One Converse stream event (or a Nova chunk holding one); True when it carries content."""
    if kind == "contentBlockDelta":
        delta = as_dict(ev.get("delta"))
        if text := as_str(delta.get("text")):
            tally.text.append(text)
            return True
        reasoning = as_dict(delta.get("reasoningContent"))
        if thought := as_str(reasoning.get("text")):
            tally.reasoning.append(thought)
            return True
        if (piece := as_str(as_dict(delta.get("toolUse")).get("input"))) and (
            block := _block(ev)
        ) not in tally.server_blocks:
            tally.tool(block).parts.append(piece)
            return True
        return bool(piece)
    if kind == "contentBlockStart":
        use = as_dict(as_dict(ev.get("start")).get("toolUse"))
        if use and use.get("type") == "server_tool_use":
            tally.server_blocks.add(_block(ev))  # run by the provider: no call for the client
        elif use:
            call = tally.tool(_block(ev))
            call.id, call.name = as_str(use.get("toolUseId")), as_str(use.get("name"))
    elif kind == "messageStop":
        stop = as_str(ev.get("stopReason")) or None
        _finish_calls(tally)
        tally.end(_STOP.get(stop, Outcome.COMPLETED) if stop else Outcome.COMPLETED, stop)
        tally.follow = frozenset({"metadata"})  # usage comes after the stop
    elif kind == "metadata":
        _usage(tally, as_dict(ev.get("usage")))
    elif _is_exception(kind):
        tally.end(Outcome.ERROR, str(kind))
    elif kind not in CONVERSE_EVENTS:
        tally.unknown(seq, str(kind))
    return False


def _usage(tally: Tally, usage: dict[str, Any]) -> None:
    if not usage:
        return
    # TokenUsage: inputTokens leaves cache reads and writes out, as Anthropic's does.
    tally.usage(usage.get("inputTokens"), usage.get("outputTokens"), usage.get("totalTokens"))
    tally.usage_details(
        cache_read=usage.get("cacheReadInputTokens", usage.get("cacheReadInputTokenCount")),
        cache_write=usage.get("cacheWriteInputTokens", usage.get("cacheWriteInputTokenCount")),
    )


def _finish_calls(tally: Tally) -> None:
    for call in tally.tools.values():
        if not "".join(call.parts) and call.final is None:
            call.final = "{}"


def body(tally: Tally, obj: dict[str, Any]) -> None:
    """A whole Converse answer: ``output.message.content`` blocks, ``stopReason``, usage."""
    message = as_dict(as_dict(obj.get("output")).get("message"))
    blocks = message.get("content")
    for i, block in enumerate(blocks if isinstance(blocks, list) else ()):
        block = as_dict(block)
        if text := as_str(block.get("text")):
            tally.text.append(text)
        reasoning = as_dict(as_dict(block.get("reasoningContent")).get("reasoningText"))
        if thought := as_str(reasoning.get("text")):
            tally.reasoning.append(thought)
        use = as_dict(block.get("toolUse"))
        if use and use.get("type") != "server_tool_use":
            call = tally.tool(("block", i))
            call.id, call.name = as_str(use.get("toolUseId")), as_str(use.get("name"))
            call.final = orjson.dumps(use.get("input", {})).decode()
    _usage(tally, as_dict(obj.get("usage")))
    stop = as_str(obj.get("stopReason")) or None
    if stop is None and isinstance(obj.get("message"), str):
        tally.end(Outcome.ERROR, "error")  # an exception answered with HTTP 200
        return
    tally.end(_STOP.get(stop, Outcome.COMPLETED) if stop else Outcome.COMPLETED, stop)


RULES = ApiRules(
    name="bedrock_converse",
    paths=("/converse-stream", "/converse"),
    event=converse_event,
    body=body,
    claims_event=lambda kind, _obj: kind == "messageStart",
    claims_body=lambda obj: isinstance(obj.get("output"), dict) and "stopReason" in obj,
    no_terminal="The stream ended without messageStop or an exception.",
    terminal_events=frozenset({"messageStop"}),
    error_events=frozenset(
        {
            "internalServerException",
            "modelStreamErrorException",
            "validationException",
            "throttlingException",
            "serviceUnavailableException",
        }
    ),
    content_events=frozenset({"contentBlockDelta"}),
    input_excludes_cache=True,
    model_of_path=model_of_path,
    vendor="aws",
)
