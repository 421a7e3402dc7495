"""The registry of APIs: how an exchange's API is found, and that adding one is one entry."""

from __future__ import annotations

from typing import Any

import pytest

from ssetape.analysis import apis
from ssetape.analysis.analyzer import Analyzer
from ssetape.analysis.api_rules import ApiRules
from ssetape.analysis.tally import Tally
from ssetape.vocabulary import Outcome


@pytest.mark.parametrize(
    ("path", "api"),
    [
        ("/v1/chat/completions", "chat_completions"),
        ("/api/v1/chat/completions?x=1", "chat_completions"),  # an OpenRouter-style prefix
        ("/openai/deployments/d/chat/completions/", "chat_completions"),
        ("/v1/responses", "responses"),
        ("/v1/messages", "messages"),
        ("/v1/images/generations", "images"),
        ("/v1/images/edits", "images"),
        ("/v1/embeddings", "unknown"),
        # A Responses stream resumed by id; the input items of a response are no stream.
        ("/v1/responses/resp_0850?starting_after=0&stream=true", "responses"),
        ("/v1/responses/resp_0850/input_items", "unknown"),
        ("/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", "gemini"),
        ("/v1beta/models/gemini-2.5-flash:generateContent", "gemini"),
        ("/model/us.anthropic.claude-sonnet-4-20250514-v1%3A0/converse-stream", "bedrock_converse"),
        ("/model/amazon.nova-lite-v1:0/converse", "bedrock_converse"),
        (
            "/model/anthropic.claude-3-sonnet-20240229-v1:0/invoke-with-response-stream",
            "bedrock_invoke",
        ),
        ("/my-chain/invoke", "unknown"),  # a bare /invoke is other services' word too
        ("/api/chat", "ollama"),
        ("/api/generate", "ollama"),
        ("/v2/chat", "cohere_chat"),
        ("/v1beta/interactions", "interactions"),
        ("/v1beta/interactions/v1_abc?stream=true&last_event_id=3", "interactions"),
    ],
)
def test_the_api_of_a_path(path: str, api: str) -> None:
    assert apis.detect_api(path) == api


def test_which_json_answers_are_streams() -> None:
    assert apis.streams_array("/v1beta/models/gemini-2.5-flash:streamGenerateContent")
    assert not apis.streams_array("/v1beta/models/gemini-2.5-flash:generateContent")
    assert not apis.streams_array("/v1/chat/completions")


def test_the_api_of_an_event_or_a_body_when_the_path_does_not_tell() -> None:
    assert apis.api_of_event("response.created", {}) == "responses"
    assert apis.api_of_event(None, {"type": "message_start"}) == "messages"
    assert apis.api_of_event("image_generation.partial_image", {}) == "images"
    assert apis.api_of_event(None, {"choices": []}) == "chat_completions"
    # A typed event outranks a "choices" key.
    assert apis.api_of_event("response.output_text.delta", {"choices": []}) == "responses"
    assert apis.api_of_event(None, {"hello": 1}) == "unknown"
    assert apis.api_of_body({"object": "response"}) == "responses"
    assert apis.api_of_body({"type": "message"}) == "messages"
    assert apis.api_of_event(None, {"candidates": [], "modelVersion": "gemini-2.5"}) == "gemini"
    assert apis.api_names() == [
        "chat_completions", "responses", "messages", "images", "gemini", "cohere_chat",
        "interactions", "bedrock_converse", "bedrock_invoke", "ollama", "openai_realtime",
        "gemini_live", "unknown",
    ]  # fmt: skip
    assert apis.api_of_event("messageStart", {"role": "assistant"}) == "bedrock_converse"
    assert apis.api_of_event("chunk", {"bytes": "e30="}) == "bedrock_invoke"
    line = {"model": "llama3", "created_at": "2024-05-24T20:26:46Z", "done": False}
    assert apis.api_of_event(None, line) == "ollama"


def test_a_new_api_is_one_rules_object_and_one_registry_entry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def event(tally: Tally, seq: int, kind: str | None, ev: dict[str, Any]) -> bool:
        if kind == "echo.delta":
            tally.text.append(str(ev.get("text", "")))
            return True
        if kind == "echo.done":
            tally.end(Outcome.COMPLETED, "done")
        return False

    echo = ApiRules(
        name="echo",
        paths=("/v1/echo",),
        event=event,
        body=lambda tally, obj: None,
        claims_event=lambda kind, obj: bool(kind) and str(kind).startswith("echo."),
        claims_body=lambda obj: False,
        no_terminal="The stream ended without echo.done.",
    )
    monkeypatch.setitem(apis.APIS, "echo", echo)
    an = Analyzer(method="POST", path="/gateway/v1/echo", request_body=b'{"model": "e-1"}')
    for seq, (name, data) in enumerate(
        [("echo.delta", '{"text": "he"}'), (None, '{"type": "echo.delta", "text": "y"}')]
    ):
        an.feed(seq, 1000 * (seq + 1), name, data)
    cut = an.finish(status=200, state="completed")
    assert (cut.api, cut.model, cut.output_text, cut.ttft_us) == ("echo", "e-1", "hey", 1000)
    assert [f.detail for f in cut.findings] == ["The stream ended without echo.done."]
    an.feed(2, 3000, "echo.done", "{}")
    done = an.finish(status=200, state="completed")
    assert (done.outcome, done.reason, done.findings) == ("completed", "done", [])
