"""A request's prompt as text (analysis.request_text), per API, from request shapes as each
provider's API reference writes them: the text of messages, system prompts and
instructions; never an image's base64, a file, a tool's schema or a call's arguments."""

from __future__ import annotations

import orjson
import pytest

from ssetape.analysis.analyzer import Analyzer
from ssetape.analysis.apis import api_names
from ssetape.analysis.request_text import MAX_PROMPT_BYTES, PROMPT_FIELDS, request_text
from ssetape.vocabulary import ExchangeState

IMAGE = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJ"
SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "description": "SECRET"}}}

CHAT = {
    "model": "gpt-4o",
    "messages": [
        {"role": "developer", "content": "You are a billing assistant."},
        {"role": "user", "content": [
            {"type": "text", "text": "What is on invoice INV-1?"},
            {"type": "image_url", "image_url": {"url": IMAGE, "detail": "low"}},
        ]},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "lookup", "arguments": '{"number": "SECRET"}'},
        }]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Total: 42 EUR"},
    ],
    "tools": [{"type": "function", "function": {
        "name": "lookup", "description": "SECRET", "parameters": SCHEMA,
    }}],
    "user": "SECRET",
}  # fmt: skip

RESPONSES = {
    "model": "gpt-4.1",
    "instructions": "Talk like a pirate.",
    "input": [
        {"role": "user", "content": [
            {"type": "input_text", "text": "What is in this image?"},
            {"type": "input_image", "image_url": IMAGE},
            {"type": "input_file", "filename": "a.pdf",
             "file_data": "data:application/pdf;base64,JVBERi0x"},
        ]},
        {"type": "function_call", "call_id": "c1", "name": "lookup",
         "arguments": '{"q": "SECRET"}'},
        {"role": "assistant", "content": [{"type": "output_text", "text": "A parrot."}]},
    ],
    "tools": [{"type": "function", "name": "lookup", "description": "SECRET",
               "parameters": SCHEMA}],
    "metadata": {"note": "SECRET"},
}  # fmt: skip

MESSAGES = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 1024,
    "system": [{"type": "text", "text": "You are a tax adviser.",
                "cache_control": {"type": "ephemeral"}}],
    "messages": [
        {"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": "iVBORw0KGgoSECRET"}},
            {"type": "text", "text": "Describe this receipt."},
        ]},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": "SECRET"}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1",
             "content": [{"type": "text", "text": "Receipt 7: a coffee"}]},
        ]},
    ],
    "tools": [{"name": "lookup", "description": "SECRET", "input_schema": SCHEMA}],
}  # fmt: skip

GEMINI = {
    "systemInstruction": {"parts": [{"text": "You are a cat."}]},
    "contents": [
        {"role": "user", "parts": [
            {"text": "Hello there"},
            {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgoSECRET"}},
        ]},
        {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {"q": "SECRET"}}}]},
        {"role": "model", "parts": [{"text": "Meow"}]},
    ],
    "tools": [{"functionDeclarations": [{"name": "f", "description": "SECRET"}]}],
    "generationConfig": {"temperature": 0.5},
}  # fmt: skip


@pytest.mark.parametrize(
    ("api", "body", "expected"),
    [
        ("chat_completions", CHAT,
         "You are a billing assistant.\nWhat is on invoice INV-1?\nTotal: 42 EUR"),
        ("responses", RESPONSES, "Talk like a pirate.\nWhat is in this image?\nA parrot."),
        ("responses", {"model": "o4-mini", "input": "Tell me a joke."}, "Tell me a joke."),
        ("messages", MESSAGES,
         "You are a tax adviser.\nDescribe this receipt.\nReceipt 7: a coffee"),
        ("messages", {"system": "Be brief.", "messages": [{"role": "user", "content": "Hi"}]},
         "Be brief.\nHi"),
        ("gemini", GEMINI, "You are a cat.\nHello there\nMeow"),
        ("gemini", {"system_instruction": {"parts": [{"text": "Be terse."}]},
                    "contents": [{"parts": [{"text": "Why?"}]}]}, "Be terse.\nWhy?"),
        ("bedrock_converse", {"system": [{"text": "Answer in French."}],
                              "messages": [{"role": "user", "content": [{"text": "Hello"}]}]},
         "Answer in French.\nHello"),
        ("ollama", {"model": "llama3", "system": "Be kind.", "prompt": "Why is the sky blue?",
                    "images": ["iVBORw0KGgoSECRET"]}, "Be kind.\nWhy is the sky blue?"),
        ("interactions", {"model": "gemini-2.5-flash", "system_instruction": "Be terse.",
                          "input": [{"type": "text", "text": "Hello"}]}, "Be terse.\nHello"),
        ("cohere_chat", {"model": "command-r", "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Hola"}]}]}, "Hola"),
        ("images", {"model": "gpt-image-1", "prompt": "A red fox"}, "A red fox"),
    ],
)  # fmt: skip
def test_the_prompt_of_each_api_is_its_messages_text(api: str, body: object, expected: str) -> None:
    text = request_text(api, body)
    assert text == expected
    assert "SECRET" not in text and "base64" not in text


def test_what_has_no_prompt_has_no_text() -> None:
    assert request_text("unknown", {"messages": [{"content": "hi"}]}) is None
    assert request_text("chat_completions", ["not", "an", "object"]) is None
    assert request_text("chat_completions", {"messages": [{"content": None}]}) is None
    assert request_text("chat_completions", {"model": "gpt-4o"}) is None
    assert set(PROMPT_FIELDS) <= set(api_names())


def test_a_long_prompt_keeps_its_start_and_its_end_within_the_bound() -> None:
    system = "SYSTEM PROMPT " + "é" * 20_000  # two bytes a character: cut inside one too
    history = [{"role": "user", "content": f"turn {n} " + "x" * 1000} for n in range(200)]
    latest = {"role": "user", "content": "the newest question"}
    body = {"messages": [{"role": "system", "content": system}, *history, latest]}
    text = request_text("chat_completions", body)
    assert text is not None
    assert len(text.encode()) <= MAX_PROMPT_BYTES
    assert text.startswith("SYSTEM PROMPT é")
    assert text.endswith("the newest question")
    assert "turn 0 " not in text  # the middle of the history is what goes


def test_a_deeply_nested_body_is_read_without_failing() -> None:
    deep: object = "bottom"
    for _ in range(5000):
        deep = [deep]
    assert request_text("chat_completions", {"messages": [{"content": deep}]}) is None
    assert request_text("chat_completions", {"messages": [{"content": "top"}, deep]}) == "top"


def test_the_analysis_reads_it_from_the_body_as_stored() -> None:
    body = orjson.dumps(CHAT)
    a = Analyzer(method="POST", path="/v1/chat/completions", request_body=body)
    done = a.finish(status=500, state=ExchangeState.COMPLETED)
    assert done.request_text == request_text("chat_completions", CHAT)
    # Not JSON (or not stored: over the body bound): no text.
    raw = Analyzer(method="POST", path="/v1/chat/completions", request_body=b"\xff{")
    assert raw.finish(status=200, state=ExchangeState.COMPLETED).request_text is None
