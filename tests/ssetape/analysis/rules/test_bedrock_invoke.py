"""Amazon Bedrock's InvokeModelWithResponseStream: ``ssetape.analysis.rules.bedrock_invoke``,
on chunks built as AWS documents them: a Titan Text chunk (Bedrock user guide, Amazon Titan
Text models: ``outputText``, ``index``, ``totalOutputTextTokenCount``, ``completionReason``,
``inputTextTokenCount``) and the guardrail's verdict in the body (InvokeModel API reference,
guardrail example: ``"amazon-bedrock-guardrailAction": "INTERVENED | NONE"``)."""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest

from tests.ssetape.analysis.streams import run

MODEL = "amazon.titan-text-express-v1"
PATH = f"/model/{MODEL}/invoke-with-response-stream"
REQUEST = {"inputText": "How do I pick a lock?", "textGenerationConfig": {"maxTokenCount": 50}}
BLOCKED = "Sorry, the model cannot answer this question."
METRICS = {"inputTokenCount": 7, "outputTokenCount": 9, "invocationLatency": 312}


def chunk(inner: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """One event-stream ``chunk`` frame: the model's JSON, base64 in ``bytes`` (PayloadPart)."""
    return "chunk", {"bytes": base64.b64encode(orjson.dumps(inner)).decode()}


def blocked(**extra: Any) -> dict[str, Any]:
    """The one chunk of a Titan stream a guardrail blocked: its message and the token counts,
    no completionReason."""
    return {
        "outputText": BLOCKED,
        "index": 0,
        "totalOutputTextTokenCount": 9,
        "inputTextTokenCount": 7,
        "amazon-bedrock-guardrailAction": "INTERVENED",
        **extra,
    }


@pytest.mark.parametrize("metrics", [False, True])
def test_titan_stream_a_guardrail_blocked_is_a_refusal_with_usage(metrics: bool) -> None:
    inner = blocked(**({"amazon-bedrock-invocationMetrics": METRICS} if metrics else {}))
    a = run(PATH, [chunk(inner)], request=REQUEST)
    assert (a.api, a.model) == ("bedrock_invoke", MODEL)
    # Withheld by the guardrail, not cut: refused, named as Converse names it.
    assert (a.outcome, a.reason) == ("refused", "guardrail_intervened")
    assert (a.input_tokens, a.output_tokens, a.total_tokens) == (7, 9, 16)
    assert a.output_text == BLOCKED
    assert a.findings == []


def test_a_guardrail_that_let_the_answer_through_changes_nothing() -> None:
    first = {"outputText": "Hello", "index": 0, "amazon-bedrock-guardrailAction": "NONE"}
    last = {
        "outputText": " there.",
        "index": 0,
        "totalOutputTextTokenCount": 3,
        "completionReason": "FINISH",
        "inputTextTokenCount": 7,
        "amazon-bedrock-guardrailAction": "NONE",
    }
    a = run(PATH, [chunk(first), chunk(last)], request=REQUEST)
    assert (a.outcome, a.reason, a.output_text) == ("completed", "FINISH", "Hello there.")
    assert a.findings == []
