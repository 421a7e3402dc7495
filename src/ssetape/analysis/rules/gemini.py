"""Rules of Google's Gemini API (``models/{model}:streamGenerateContent`` and ``:generateContent``).

Every event, and a whole answer, is a ``GenerateContentResponse``: ``candidates[0]`` holds
``content.parts`` (``text``, reasoning as ``text`` with ``"thought": true``, whole
``functionCall`` objects) and, on the last chunk, ``finishReason``; ``usageMetadata`` is
cumulative, so the last one counts; ``promptFeedback.blockReason`` says the prompt itself was
blocked. Events carry no names and there is no ``[DONE]``: the chunk with a finishReason is the
terminal. The usage may still follow in a later chunk, so that chunk marks the stream finished
without closing it (a close would report the usage chunk as arriving after the terminal).

Without ``alt=sse`` the same objects arrive as the elements of one streamed JSON array (see
:mod:`ssetape.framing.json_array`); :func:`body_elements` applies such an array read whole.

finishReason -> outcome, after the google-genai SDK's ``FinishReason`` enum:

* STOP, OTHER, FINISH_REASON_UNSPECIFIED, and values unknown here -> completed (as the other
  APIs' unknown stop reasons: the model ended its answer);
* MAX_TOKENS -> incomplete;
* SAFETY, RECITATION, LANGUAGE, BLOCKLIST, PROHIBITED_CONTENT, SPII, MODEL_ARMOR (Vertex),
  IMAGE_SAFETY, IMAGE_PROHIBITED_CONTENT, IMAGE_RECITATION -> refused (a filter or policy
  stopped it);
* MALFORMED_FUNCTION_CALL, UNEXPECTED_TOOL_CALL, TOO_MANY_TOOL_CALLS,
  MISSING_THOUGHT_SIGNATURE, NO_IMAGE, IMAGE_OTHER -> error (the generation failed).

The reason is always the finishReason itself. A ``promptFeedback.blockReason`` is refused with
that reason; an ``{"error": {code, message, status}}`` object is an error labelled by its
``status`` (else code, else message).

Vertex AI's REST clients ask for enums as numbers (``"finishReason": 1``): a number is read as
the name the profile gives it (Vertex's numbering under its profile, else only the values the
Google protos share), an unknown one as ``FINISH_REASON_<n>`` / ``BLOCKED_REASON_<n>``.
Vertex also sends ``usageMetadata`` holding no count on intermediate chunks (only
``trafficType``); a usage object is read only for the counts it holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from ssetape.analysis.api_rules import ApiRules
from ssetape.analysis.findings import FindingCode
from ssetape.analysis.rules.payload import as_dict, as_str
from ssetape.analysis.tally import Tally, as_count
from ssetape.vocabulary import Outcome

__all__ = ["FINISH", "RULES", "body_elements", "error_reason"]

FINISH: dict[str, Outcome] = {
    "STOP": Outcome.COMPLETED,
    "OTHER": Outcome.COMPLETED,
    "FINISH_REASON_UNSPECIFIED": Outcome.COMPLETED,
    "MAX_TOKENS": Outcome.INCOMPLETE,
    **dict.fromkeys(
        (
            "SAFETY",
            "RECITATION",
            "LANGUAGE",
            "BLOCKLIST",
            "PROHIBITED_CONTENT",
            "SPII",
            "MODEL_ARMOR",
            "IMAGE_SAFETY",
            "IMAGE_PROHIBITED_CONTENT",
            "IMAGE_RECITATION",
        ),
        Outcome.REFUSED,
    ),
    **dict.fromkeys(
        (
            "MALFORMED_FUNCTION_CALL",
            "UNEXPECTED_TOOL_CALL",
            "TOO_MANY_TOOL_CALLS",
            "MISSING_THOUGHT_SIGNATURE",
            "NO_IMAGE",
            "IMAGE_OTHER",
        ),
        Outcome.ERROR,
    ),
}

# The usage fields that are counts: a usage object with none of them tells nothing.
_COUNTS = (
    "promptTokenCount",
    "candidatesTokenCount",
    "totalTokenCount",
    "thoughtsTokenCount",
    "cachedContentTokenCount",
    "toolUsePromptTokenCount",
)
_TOOL_USE = "toolUsePromptTokenCount"


def error_reason(err: object) -> str:
    """The label of a Google error object: its ``status`` name, else its code or message."""
    status = as_dict(err).get("status")
    if isinstance(status, str) and status:
        return status
    return Tally.error_reason(err) or "error"


def event(tally: Tally, seq: int, name: str | None, chunk: dict[str, Any]) -> bool:
    if name is not None:
        tally.unknown(seq, name)  # Gemini's events carry no names
    return _response(tally, chunk) if chunk else False


def _response(tally: Tally, obj: dict[str, Any]) -> bool:
    """One ``GenerateContentResponse`` (or error object); True when it carried content."""
    error = obj.get("error")
    if error is not None:
        # Sent as an event or array element when the stream fails after it started: nothing
        # follows it.
        tally.end(Outcome.ERROR, error_reason(error))
        return False
    tally.set_model(obj.get("modelVersion"))
    usage = obj.get("usageMetadata")
    if isinstance(usage, dict):
        _usage(tally, usage)
    content = False
    finish: object = None
    candidates = obj.get("candidates")
    for candidate in candidates if isinstance(candidates, list) else ():
        # proto3 JSON omits a zero index, so a missing index is candidate 0. Only candidate 0
        # is assembled, as chat_completions does with choice 0.
        if not isinstance(candidate, dict) or candidate.get("index", 0) != 0:
            continue
        content = _parts(tally, as_dict(candidate.get("content")).get("parts")) or content
        finish = (
            _enum(candidate.get("finishReason"), tally.profile.gemini_finish_codes, "FINISH_REASON")
            or finish
        )
    if isinstance(finish, str) and tally.outcome is None:
        tally.outcome = FINISH.get(finish, Outcome.COMPLETED)
        tally.reason = finish
        tally.finished = True
    block = _enum(
        as_dict(obj.get("promptFeedback")).get("blockReason"),
        tally.profile.gemini_block_codes,
        "BLOCKED_REASON",
    )
    if block and tally.outcome is None:
        # The prompt was refused before any candidate: this response is the whole answer.
        tally.outcome, tally.reason, tally.finished = Outcome.REFUSED, block, True
    return content


def _enum(value: object, names: Mapping[int, str], prefix: str) -> str | None:
    """An enum field as its name: a string as sent, a number (Vertex's int encoding) by
    ``names``; anything else (absent, null, empty) is no value."""
    if isinstance(value, str):
        return value or None
    if isinstance(value, int) and not isinstance(value, bool):
        return names.get(value) or f"{prefix}_{value}"
    return None


def _usage(tally: Tally, usage: dict[str, Any]) -> None:
    if not any(as_count(usage.get(key)) is not None for key in _COUNTS):
        # Vertex's intermediate chunks carry {"trafficType": ...} only: no counts to read.
        return
    candidates = usage.get("candidatesTokenCount")
    thoughts = usage.get("thoughtsTokenCount")
    # Gemini's candidatesTokenCount excludes the thinking tokens, while output_tokens includes
    # reasoning everywhere else (OpenAI's reasoning_tokens are part of completion_tokens), so
    # the two are added. proto3 JSON omits zero counts, so either may be missing alone.
    counted, thought = as_count(candidates), as_count(thoughts)
    output = None if counted is None and thought is None else (counted or 0) + (thought or 0)
    # Input is the prompt plus what tool use (search, code execution) added to it, as billed
    # and as totalTokenCount sums it: toolUsePromptTokenCount is reported apart.
    prompt, tool_use = as_count(usage.get("promptTokenCount")), as_count(usage.get(_TOOL_USE))
    inp = prompt if tool_use is None or prompt is None else prompt + tool_use
    tally.usage(inp, output, usage.get("totalTokenCount"))
    tally.usage_details(cache_read=usage.get("cachedContentTokenCount"), reasoning=thoughts)


def _parts(tally: Tally, parts: object) -> bool:
    content = False
    for part in parts if isinstance(parts, list) else ():
        if not isinstance(part, dict):
            continue
        text = part.get("text")
        if isinstance(text, str) and text:
            # A thought part is the model's reasoning (includeThoughts), not its answer.
            (tally.reasoning if part.get("thought") is True else tally.text).append(text)
            content = True
        call = part.get("functionCall")
        if isinstance(call, dict):
            _call(tally, call)
            content = True
    return content


def _call(tally: Tally, call: dict[str, Any]) -> None:
    # A functionCall arrives whole, never as argument deltas; the API's id is optional, so
    # calls without one are keyed by their order.
    call_id = as_str(call.get("id"))
    entry = tally.tool(("call", call_id) if call_id else ("call", len(tally.tools)))
    entry.id = entry.id or call_id
    entry.name = entry.name or as_str(call.get("name"))
    args = call.get("args")
    entry.final = orjson.dumps(args if isinstance(args, dict) else {}).decode()


def body(tally: Tally, obj: dict[str, Any]) -> None:
    """A whole ``GenerateContentResponse``, or an error object sent with HTTP 200."""
    _response(tally, obj)
    if tally.outcome is None:
        # A whole answer without finishReason still ended: the body is complete.
        tally.outcome = Outcome.COMPLETED
    tally.closed = tally.finished = True


def body_elements(tally: Tally, elements: list[object]) -> None:
    """The elements of a non-SSE stream (a JSON array) read whole, applied in stream order.

    Unlike :func:`body`, nothing is assumed when no element had a finishReason: the array
    came from a stream, which may have been cut."""
    for element in elements:
        if tally.closed:
            detail = "An element of the response array arrived after the terminal."
            tally.add(FindingCode.EVENT_AFTER_TERMINAL, None, detail)
            break
        if isinstance(element, dict):
            _response(tally, element)
        else:
            detail = "An element of the response array is not a JSON object."
            tally.add(FindingCode.INVALID_JSON, None, detail)


def payload_kind(obj: dict[str, Any]) -> str:
    if obj.get("error") is not None:
        return "error"
    candidates = obj.get("candidates")
    kind = "meta"
    for candidate in candidates if isinstance(candidates, list) else ():
        if not isinstance(candidate, dict):
            continue
        if FINISH.get(as_str(candidate.get("finishReason"))) == Outcome.ERROR:
            return "error"
        parts = as_dict(candidate.get("content")).get("parts")
        for part in parts if isinstance(parts, list) else ():
            if isinstance(part, dict) and (part.get("text") or part.get("functionCall")):
                kind = "content"
    return kind


def _claims(obj: object) -> bool:
    return (
        isinstance(obj, dict)
        and ("candidates" in obj or "usageMetadata" in obj)
        and "choices" not in obj
    )


RULES = ApiRules(
    name="gemini",
    paths=(":streamGenerateContent", ":generateContent"),
    event=event,
    body=body,
    claims_event=lambda _name, obj: _claims(obj),
    claims_body=_claims,
    no_terminal="The stream ended without a finishReason.",
    typed_events=False,
    payload_kind=payload_kind,
    array_paths=(":streamGenerateContent",),
    body_array=body_elements,
    error_reason=error_reason,
    vendor="google",
)
