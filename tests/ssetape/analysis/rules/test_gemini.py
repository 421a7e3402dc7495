"""The rules of Google's Gemini API: ``ssetape.analysis.rules.gemini``, on official payloads."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from ssetape.analysis.findings import FindingCode
from ssetape.analysis.rules.gemini import FINISH, RULES, body_elements, error_reason
from ssetape.analysis.tally import Tally
from ssetape.framing.json_array import JsonArrayParser
from ssetape.vocabulary import Outcome

MODEL = "gemini-2.5-flash"


def chunk(
    *parts: dict[str, Any],
    finish: str | None = None,
    usage: dict[str, int] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A streamed GenerateContentResponse as the REST API sends it (camelCase, proto3 JSON)."""
    candidate: dict[str, Any] = {"content": {"parts": list(parts), "role": "model"}}
    if finish:
        candidate["finishReason"] = finish
    obj: dict[str, Any] = {"candidates": [candidate], "modelVersion": MODEL, "responseId": "r1"}
    if usage is not None:
        obj["usageMetadata"] = usage
    return {**obj, **extra}


def feed(*payloads: dict[str, Any]) -> tuple[Tally, list[bool]]:
    tally = Tally("gemini")
    return tally, [RULES.event(tally, seq, None, p) for seq, p in enumerate(payloads)]


USAGE = {
    "promptTokenCount": 9,
    "candidatesTokenCount": 5,
    "totalTokenCount": 34,
    "thoughtsTokenCount": 20,
    "cachedContentTokenCount": 4,
}


def test_text_stream_with_thoughts_and_usage() -> None:
    tally, content = feed(
        chunk({"text": "Let me think.", "thought": True}, usage={"promptTokenCount": 9}),
        chunk({"text": "Hello"}, usage={"promptTokenCount": 9, "totalTokenCount": 12}),
        chunk({"text": " world"}, finish="STOP", usage=USAGE),
    )
    assert content == [True, True, True]
    assert "".join(tally.text) == "Hello world"
    assert "".join(tally.reasoning) == "Let me think."
    assert tally.model == MODEL
    # output_tokens includes the thinking tokens, as OpenAI's completion_tokens do.
    assert (tally.input_tokens, tally.output_tokens, tally.total_tokens) == (9, 25, 34)
    assert (tally.cache_read_tokens, tally.reasoning_tokens) == (4, 20)
    assert (tally.outcome, tally.reason) == (Outcome.COMPLETED, "STOP")
    assert tally.finished and not tally.closed
    assert tally.findings == []


def test_usage_in_a_chunk_after_the_finish_reason() -> None:
    tally, content = feed(
        chunk({"text": "Hi"}),
        chunk({"text": ""}, finish="STOP"),
        {"candidates": [], "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 1}},
    )
    assert content == [True, False, False]
    assert (tally.outcome, tally.reason) == (Outcome.COMPLETED, "STOP")
    assert (tally.input_tokens, tally.output_tokens) == (3, 1)
    # Not closed: the later usage chunk is no event_after_terminal.
    assert not tally.closed and tally.findings == []


def test_counts_missing_because_zero_are_not_guessed() -> None:
    # proto3 JSON omits zero counts: only thoughts were produced so far.
    tally, _ = feed(chunk(usage={"promptTokenCount": 2, "thoughtsTokenCount": 7}))
    assert (tally.output_tokens, tally.reasoning_tokens, tally.total_tokens) == (7, 7, None)
    tally, _ = feed(chunk(usage={"promptTokenCount": 2, "candidatesTokenCount": 3}))
    assert (tally.output_tokens, tally.reasoning_tokens) == (3, None)


@pytest.mark.parametrize(
    ("finish", "outcome"),
    [
        ("STOP", Outcome.COMPLETED),
        ("OTHER", Outcome.COMPLETED),
        ("FINISH_REASON_UNSPECIFIED", Outcome.COMPLETED),
        ("SOMETHING_NEW", Outcome.COMPLETED),
        ("MAX_TOKENS", Outcome.INCOMPLETE),
        ("SAFETY", Outcome.REFUSED),
        ("RECITATION", Outcome.REFUSED),
        ("BLOCKLIST", Outcome.REFUSED),
        ("PROHIBITED_CONTENT", Outcome.REFUSED),
        ("SPII", Outcome.REFUSED),
        ("IMAGE_SAFETY", Outcome.REFUSED),
        ("MALFORMED_FUNCTION_CALL", Outcome.ERROR),
        ("UNEXPECTED_TOOL_CALL", Outcome.ERROR),
        ("TOO_MANY_TOOL_CALLS", Outcome.ERROR),
    ],
)
def test_finish_reasons(finish: str, outcome: Outcome) -> None:
    tally, _ = feed(chunk({"text": "Hi"}), chunk(finish=finish))
    assert (tally.outcome, tally.reason) == (outcome, finish)
    assert tally.finished
    kind = "error" if outcome == Outcome.ERROR else "meta"
    assert RULES.payload_kind is not None
    assert RULES.payload_kind(chunk(finish=finish)) == kind
    if finish in FINISH:
        assert FINISH[finish] == outcome


def test_function_calls() -> None:
    args = {"city": "Zürich", "days": 3}
    tally, content = feed(
        chunk({"functionCall": {"name": "get_weather", "args": args}}),
        chunk(
            {"functionCall": {"id": "c2", "name": "get_time", "args": {}}},
            {"functionCall": {"name": "no_args"}},
            finish="STOP",
        ),
    )
    assert content == [True, True]
    calls = [(c.id, c.name, c.final) for c in tally.tools.values()]
    assert calls == [
        ("", "get_weather", orjson.dumps(args).decode()),
        ("c2", "get_time", "{}"),
        ("", "no_args", "{}"),
    ]
    assert tally.text == []


def test_blocked_prompt_is_refused() -> None:
    blocked = {
        "promptFeedback": {"blockReason": "PROHIBITED_CONTENT"},
        "usageMetadata": {"promptTokenCount": 8, "totalTokenCount": 8},
        "modelVersion": MODEL,
    }
    tally, content = feed(blocked)
    assert content == [False]
    assert (tally.outcome, tally.reason) == (Outcome.REFUSED, "PROHIBITED_CONTENT")
    assert tally.finished and tally.input_tokens == 8
    assert RULES.claims_event(None, blocked)


def test_error_object_mid_stream() -> None:
    error = {"error": {"code": 429, "message": "Quota exceeded", "status": "RESOURCE_EXHAUSTED"}}
    tally, content = feed(chunk({"text": "Hi"}), error)
    assert content == [True, False]
    assert (tally.outcome, tally.reason) == (Outcome.ERROR, "RESOURCE_EXHAUSTED")
    assert tally.closed and tally.finished
    assert RULES.payload_kind is not None and RULES.payload_kind(error) == "error"
    assert error_reason({"code": 500, "message": "Internal"}) == "500"
    assert error_reason({"message": "Internal"}) == "Internal"
    assert error_reason("nope") == "nope"
    assert error_reason({}) == "error"


def test_event_names_are_unknown() -> None:
    tally = Tally("gemini")
    assert RULES.event(tally, 0, "completion", chunk({"text": "Hi"}))
    assert [f.code for f in tally.findings] == [FindingCode.UNKNOWN_EVENT]
    assert not RULES.event(tally, 1, None, {})


def test_only_candidate_zero_is_assembled() -> None:
    obj = chunk({"text": "A"})
    obj["candidates"].append({"index": 1, "content": {"parts": [{"text": "B"}]}})
    tally, _ = feed(obj)
    assert tally.text == ["A"]


def test_malformed_fields_are_ignored() -> None:
    weird: dict[str, Any] = {
        "candidates": [None, {"content": {"parts": [3, {"text": 5}, {"functionCall": "x"}]}}],
        "usageMetadata": {"promptTokenCount": "9", "candidatesTokenCount": True},
        "promptFeedback": [],
        "modelVersion": 7,
    }
    tally, content = feed(weird, {"candidates": "no"})
    assert content == [False, False]
    assert (tally.text, len(tally.tools), tally.model, tally.outcome) == ([], 0, None, None)
    assert (tally.input_tokens, tally.output_tokens) == (None, None)


def test_whole_body() -> None:
    tally = Tally("gemini")
    obj = chunk({"text": "Hello", "thought": False}, finish="MAX_TOKENS", usage=USAGE)
    assert RULES.claims_body(obj)
    RULES.body(tally, obj)
    assert tally.text == ["Hello"]
    assert (tally.outcome, tally.reason) == (Outcome.INCOMPLETE, "MAX_TOKENS")
    assert tally.closed and tally.finished
    assert tally.output_tokens == 25
    # Without finishReason a whole body still ended.
    tally = Tally("gemini")
    RULES.body(tally, {"candidates": [{"content": {"parts": [{"text": "x"}]}}]})
    assert (tally.outcome, tally.reason) == (Outcome.COMPLETED, None)
    # An error sent with HTTP 200.
    tally = Tally("gemini")
    RULES.body(tally, {"error": {"code": 400, "message": "bad", "status": "INVALID_ARGUMENT"}})
    assert (tally.outcome, tally.reason) == (Outcome.ERROR, "INVALID_ARGUMENT")


def test_body_elements_from_a_streamed_array() -> None:
    payloads = [
        chunk({"text": "Hel"}),
        chunk({"text": "lo"}, finish="STOP", usage={"promptTokenCount": 2}),
    ]
    wire = b"[" + b"\r\n,".join(orjson.dumps(p) for p in payloads) + b"\r\n]"
    parser = JsonArrayParser()
    elements: list[object] = [orjson.loads(e) for e in parser.feed(wire) + parser.close()]
    tally = Tally("gemini")
    body_elements(tally, elements)
    assert "".join(tally.text) == "Hello"
    assert (tally.outcome, tally.input_tokens) == (Outcome.COMPLETED, 2)
    assert tally.finished and tally.findings == []
    # A cut array is not assumed to have completed; junk and late elements are reported.
    tally = Tally("gemini")
    body_elements(tally, [payloads[0], 5, {"error": {"code": 503}}, payloads[1]])
    assert (tally.outcome, tally.reason) == (Outcome.ERROR, "503")
    assert [f.code for f in tally.findings] == [
        FindingCode.INVALID_JSON,
        FindingCode.EVENT_AFTER_TERMINAL,
    ]
    tally = Tally("gemini")
    body_elements(tally, [payloads[0]])
    assert tally.outcome is None and not tally.finished


def test_claims_and_rules() -> None:
    assert RULES.name == "gemini" and not RULES.typed_events
    assert RULES.claims_event(None, {"usageMetadata": {}})
    assert not RULES.claims_event(None, {"choices": [], "candidates": []})
    assert not RULES.claims_event(None, [1])
    assert not RULES.claims_body({"choices": []})
    assert "/v1beta/models/gemini-2.5-flash:streamGenerateContent".endswith(RULES.paths)
    assert RULES.no_terminal == "The stream ended without a finishReason."
    assert RULES.payload_kind is not None
    assert RULES.payload_kind(chunk({"text": "x"})) == "content"
    assert RULES.payload_kind(chunk({"functionCall": {"name": "f"}})) == "content"
    assert RULES.payload_kind({"usageMetadata": {}}) == "meta"
