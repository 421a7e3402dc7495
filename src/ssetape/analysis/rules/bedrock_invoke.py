"""Rules of Amazon Bedrock's InvokeModelWithResponseStream
(``/model/{modelId}/invoke-with-response-stream``).

Each event-stream frame is a ``chunk`` whose payload is ``{"bytes": base64}``: the model's own
streaming JSON, wrapped (AWS API reference, InvokeModelWithResponseStream / PayloadPart). What is
inside depends on the model, and is read by the rules of that model's own API:
Anthropic's Messages events (``type``), Amazon Nova's Converse-shaped events (one key such as
``contentBlockDelta``), and the single-object chunks of Llama (``generation``, ``stop_reason``),
Titan (``outputText``, ``completionReason``), Mistral (``outputs``) and Cohere (``text``,
``finish_reason``). Bedrock adds ``amazon-bedrock-invocationMetrics`` to the last chunk: its
token counts stand when the model reported none.

A guardrail that intervened is said in the body, ``"amazon-bedrock-guardrailAction":
"INTERVENED"`` (InvokeModel's guardrail example; the headers name none). A single-object model
blocked by one sends that one chunk with the guardrail's message as ``outputText`` and its
token counts but no stop reason (Titan): the answer was withheld, refused with
``guardrail_intervened`` as Converse names it, not a stream cut before its last chunk.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import orjson

from ssetape.analysis.api_rules import ApiRules
from ssetape.analysis.findings import FindingCode
from ssetape.analysis.rules import bedrock_converse, messages
from ssetape.analysis.rules.bedrock_converse import CONVERSE_EVENTS, converse_event, model_of_path
from ssetape.analysis.rules.payload import as_dict, as_str
from ssetape.analysis.tally import Tally
from ssetape.vocabulary import Outcome

__all__ = ["RULES"]

_METRICS = "amazon-bedrock-invocationMetrics"
_GUARDRAIL = "amazon-bedrock-guardrailAction"
# The stop reasons of the models' own APIs that mean the answer was cut or withheld; any
# other stop reason ended it normally.
_STOPPED = {
    "length": Outcome.INCOMPLETE,  # Llama, Mistral
    "LENGTH": Outcome.INCOMPLETE,  # Titan
    "MAX_TOKENS": Outcome.INCOMPLETE,  # Cohere
    "max_tokens": Outcome.INCOMPLETE,
    "CONTENT_FILTERED": Outcome.REFUSED,  # Titan
    "ERROR": Outcome.ERROR,  # Cohere
    "ERROR_TOXIC": Outcome.REFUSED,
}


def event(tally: Tally, seq: int, kind: str | None, ev: dict[str, Any]) -> bool:
    if kind != "chunk":
        return converse_event(tally, seq, kind, ev)  # exceptions are named as in Converse
    inner = _unwrap(ev.get("bytes"))
    if inner is None:
        detail = "The chunk's bytes are not base64 of a JSON object."
        tally.add(FindingCode.INVALID_JSON, seq, detail)
        return False
    content = _inner(tally, seq, inner)
    metrics = as_dict(inner.get(_METRICS))
    if metrics and tally.output_tokens is None:
        tally.usage(metrics.get("inputTokenCount"), metrics.get("outputTokenCount"), None)
    return content


def _unwrap(value: object) -> dict[str, Any] | None:
    if not isinstance(value, str):
        return None
    try:
        inner = orjson.loads(base64.b64decode(value, validate=True))
    except (binascii.Error, ValueError):
        return None
    return inner if isinstance(inner, dict) else None


def _inner(tally: Tally, seq: int, inner: dict[str, Any]) -> bool:
    kind = inner.get("type")
    if isinstance(kind, str) and kind:  # Anthropic Messages
        return messages.event(tally, seq, kind, inner)
    nova = next((k for k in inner if k in CONVERSE_EVENTS), None)
    if nova is not None:
        content = converse_event(tally, seq, nova, as_dict(inner[nova]))
        if tally.follow:
            tally.follow = frozenset({"chunk"})  # the metadata chunk after messageStop
        return content
    return _single(tally, inner)


def _single(tally: Tally, inner: dict[str, Any]) -> bool:
    """One chunk of a model whose stream is whole objects with a text and a stop reason."""
    outputs = inner.get("outputs")
    first = as_dict(outputs[0]) if isinstance(outputs, list) and outputs else {}
    text = (
        as_str(inner.get("generation"))
        or as_str(inner.get("outputText"))
        or as_str(first.get("text"))
        or as_str(inner.get("text"))
        or as_str(inner.get("completion"))
    )
    if text:
        tally.text.append(text)
    tally.usage(
        inner.get("prompt_token_count", inner.get("inputTextTokenCount")),
        inner.get("generation_token_count", inner.get("totalOutputTextTokenCount")),
        None,
    )
    stop = next(
        (
            v
            for v in (
                inner.get("stop_reason"),
                inner.get("completionReason"),
                first.get("stop_reason"),
                inner.get("finish_reason"),
            )
            if isinstance(v, str) and v
        ),
        None,
    )
    if stop is not None:
        tally.end(_STOPPED.get(stop, Outcome.COMPLETED), stop)
    elif inner.get(_GUARDRAIL) == "INTERVENED":
        tally.end(Outcome.REFUSED, "guardrail_intervened")
    return bool(text)


def body(tally: Tally, obj: dict[str, Any]) -> None:
    """A whole InvokeModel answer: the model's own JSON."""
    if obj.get("type") == "message":
        messages.body(tally, obj)
    elif isinstance(obj.get("output"), dict):
        bedrock_converse.body(tally, obj)  # Nova answers in the Converse shape
    else:
        _single(tally, obj)
        if tally.outcome is None and isinstance(obj.get("message"), str):
            tally.end(Outcome.ERROR, "error")  # an exception answered with HTTP 200


RULES = ApiRules(
    name="bedrock_invoke",
    # Not a bare "/invoke": other services name their calls so.
    paths=("/invoke-with-response-stream",),
    event=event,
    body=body,
    claims_event=lambda kind, obj: kind == "chunk" and isinstance(obj, dict) and "bytes" in obj,
    claims_body=lambda _obj: False,
    no_terminal="The stream ended before the model's last chunk or an exception.",
    terminal_events=frozenset(),
    error_events=frozenset(
        {
            "internalServerException",
            "modelStreamErrorException",
            "validationException",
            "throttlingException",
            "modelTimeoutException",
            "serviceUnavailableException",
        }
    ),
    content_events=frozenset({"chunk"}),
    model_of_path=model_of_path,
    vendor="aws",
)
