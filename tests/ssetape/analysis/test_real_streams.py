"""Real provider streams (tests/data/real_streams, with their sources) read as their providers
document them: each under the profile of the host it came from, with no finding that is false
for that provider. Each is cut into frames as the recorder cuts it (SSE events, Bedrock's AWS
event-stream frames, Ollama's NDJSON lines).

What each expected value rests on: the outcome and reason are the stream's own
``finish_reason`` / ``stop_reason`` / terminal event as the provider's API reference defines it
(Anthropic's ``pause_turn`` is a paused turn the client resumes: incomplete); usage is the last
usage object the stream sent, input and output as reported, cache and reasoning counts from
``prompt_tokens_details.cached_tokens`` / ``input_tokens_details.cached_tokens``,
``cache_read_input_tokens`` / ``cache_creation_input_tokens`` and
``*_tokens_details.reasoning_tokens``; the first content event is the first that carries text,
reasoning (summaries included) or tool input. Texts are checked against the stream itself below.

The families added later, by their references: Bedrock's ConverseStream ``messageStop.stopReason``
and ``metadata.usage`` (``inputTokens`` leaves cache reads out, as Anthropic's does; the model is
the request path's ``modelId``); InvokeModelWithResponseStream's ``chunk`` holds the model's own
stream (Anthropic Messages, Nova's Converse-shaped events, Llama's ``stop_reason``, Titan's
``completionReason``); Ollama's last line ``done_reason``, ``prompt_eval_count``/``eval_count``;
Cohere v2's ``message-end`` ``finish_reason`` with ``usage.billed_units`` (what is billed: ``tokens``
also counts tokens Cohere adds itself) and ``tool-plan-delta`` as reasoning; Gemini's and
Vertex's output count includes ``thoughtsTokenCount`` and their input ``toolUsePromptTokenCount``
(Interactions: ``total_thought_tokens``, ``total_tool_use_tokens``), as they bill them and as
their totals sum them. A guardrail that
intervened (``guardrail_intervened``) withheld or masked the answer: refused.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson
import pytest

from ssetape.analysis.analyzer import Analysis, Analyzer
from ssetape.analysis.profiles import profile_for
from ssetape.framing.sse import SseParser
from tests.corpus import RealStream, by_name, real_streams

# name, profile, api, model, outcome, reason, input, output, cache read, cache write,
# reasoning tokens, seq of the first content event, len(output), len(reasoning), tool calls
# fmt: off
EXPECTED = [
    ("cc_azure_prompt_filter", "openai", "chat_completions", "gpt-4o-mini-2024-07-18", "completed", "stop", None, None, None, None, None, 2, 199, 0, 0),
    ("cc_deepseek_reasoning", "compatible", "chat_completions", "deepseek-v4-pro", "completed", "stop", 17, 47, 0, None, 34, 1, 32, 105, 0),
    ("cc_groq_error_event", "compatible", "chat_completions", "openai/gpt-oss-120b", "error", "tool_use_failed", None, None, None, None, None, 1, 0, 412, 0),
    ("cc_groq_error_event_text", "compatible", "chat_completions", "openai/gpt-oss-120b", "error", "tool_use_failed", None, None, None, None, None, 1, 5, 361, 0),
    ("cc_groq_tool_calls_xgroq", "compatible", "chat_completions", "openai/gpt-oss-120b", "completed", "tool_calls", 304, 49, None, None, 23, 1, 0, 92, 1),
    ("cc_openai_json_long", "openai", "chat_completions", "gpt-4o-2024-08-06", "completed", "stop", 19, 177, None, None, 0, 1, 608, 0, 0),
    ("cc_openai_length_max_tokens", "openai", "chat_completions", "gpt-4o-2024-08-06", "incomplete", "length", 79, 1, None, None, 0, 1, 2, 0, 0),
    ("cc_openai_length_no_usage", "openai", "chat_completions", "gpt-4o-mini-2024-07-18", "incomplete", "length", None, None, None, None, None, 1, 90, 0, 0),
    ("cc_openai_logprobs", "openai", "chat_completions", "gpt-4o-2024-08-06", "completed", "stop", 9, 2, None, None, 0, 1, 4, 0, 0),
    ("cc_openai_n3_choices", "openai", "chat_completions", "gpt-4o-2024-08-06", "completed", "stop", 79, 42, None, None, 0, 1, 53, 0, 0),
    ("cc_openai_no_usage", "openai", "chat_completions", "gpt-3.5-turbo-0125", "completed", "stop", None, None, None, None, None, 1, 92, 0, 0),
    ("cc_openai_parallel_tools", "openai", "chat_completions", "gpt-4o-2024-08-06", "completed", "tool_calls", 149, 60, None, None, 0, 2, 0, 0, 2),
    ("cc_openai_refusal", "openai", "chat_completions", "gpt-4o-2024-08-06", "refused", "refusal", 79, 11, None, None, 0, 1, 0, 0, 0),
    ("cc_openai_text_usage", "openai", "chat_completions", "gpt-4o-2024-08-06", "completed", "stop", 14, 30, None, None, 0, 1, 159, 0, 0),
    ("cc_openai_text_usage_null", "openai", "chat_completions", "gpt-4o-mini-2024-07-18", "completed", "stop", 87, 26, 0, None, 0, 1, 56, 0, 0),
    ("cc_openai_tool_usage_null", "openai", "chat_completions", "gpt-4o-mini-2024-07-18", "completed", "tool_calls", 54, 20, 0, None, 0, 1, 0, 0, 1),
    ("cc_openrouter_error_chunk", "openrouter", "chat_completions", "minimax/minimax-m2:free", "error", "400", 43, 10, 0, None, 11, 17, 0, 42, 0),
    ("cc_openrouter_reasoning", "openrouter", "chat_completions", "anthropic/claude-sonnet-4.5", "completed", "stop", 43, 36, 0, None, 13, 4, 9, 51, 0),
    ("msg_max_tokens_cache_write", "anthropic", "messages", "claude-sonnet-4-20250514", "incomplete", "max_tokens", 18, 100, 0, 1031, None, 3, 438, 0, 0),
    ("msg_max_tokens_opus", "anthropic", "messages", "claude-3-opus-20240229", "incomplete", "max_tokens", 27, 15, None, None, None, 3, 60, 0, 0),
    ("msg_pause_turn", "anthropic", "messages", "claude-sonnet-4-5-20250929", "incomplete", "pause_turn", 404500, 943, 0, 0, None, 3, 166, 1051, 0),
    ("msg_redacted_thinking", "anthropic", "messages", "claude-sonnet-4-5-20250929", "completed", "end_turn", 92, 189, 0, 0, None, 9, 359, 0, 0),
    ("msg_server_tool_code_exec", "anthropic", "messages", "claude-sonnet-4-6", "completed", "end_turn", 4714, 304, 0, 0, None, 3, 501, 46, 0),
    ("msg_stop_sequence_gzip", "anthropic", "messages", "claude-haiku-4-5-20251001", "completed", "stop_sequence", 16, 28, 0, 0, None, 3, 102, 0, 0),
    ("msg_text_plain", "anthropic", "messages", "claude-sonnet-4-5-20250929", "completed", "end_turn", 17, 10, 0, 0, None, 3, 17, 0, 0),
    ("msg_thinking", "anthropic", "messages", "claude-sonnet-4-20250514", "completed", "end_turn", 43, 282, 0, 0, None, 3, 1021, 202, 0),
    ("msg_thinking_gzip", "anthropic", "messages", "claude-haiku-4-5-20251001", "completed", "end_turn", 46, 133, 0, 0, None, 3, 89, 289, 0),
    ("msg_tool_search_tool_use", "anthropic", "messages", "claude-sonnet-4-6", "completed", "tool_use", 1591, 175, 0, 0, None, 3, 158, 0, 1),
    ("msg_tool_use_empty_gzip", "anthropic", "messages", "claude-haiku-4-5-20251001", "completed", "tool_use", 543, 40, 0, 0, None, None, 0, 0, 1),
    ("msg_tool_use_opus", "anthropic", "messages", "claude-3-opus-20240229", "completed", "tool_use", 599, 135, None, None, None, 3, 375, 0, 1),
    ("resp_annotations", "openai", "responses", "gpt-5.2-2025-12-11", "completed", "completed", 12243, 140, 0, None, 100, 14, 162, 0, 0),
    ("resp_background_queued", "openai", "responses", "gpt-4o-2024-08-06", "completed", "completed", 15, 9, 0, None, 0, 5, 15, 0, 0),
    ("resp_deepseek_reasoning", "compatible", "responses", "deepseek-v4-flash", "completed", "completed", 90, 15, 0, None, 7, 4, 31, 33, 0),
    ("resp_error_failed_quota", "openai", "responses", "gpt-5-nano-2025-08-07", "error", "insufficient_quota", None, None, None, None, None, None, 0, 0, 0),
    ("resp_function_call", "openai", "responses", "gpt-4o-2024-08-06", "completed", "completed", 255, 16, 0, None, 0, 3, 0, 0, 1),
    ("resp_function_usage", "openai", "responses", "gpt-5-2025-08-07", "completed", "completed", 53, 469, 0, None, 448, 5, 0, 0, 1),
    ("resp_incomplete", "openai", "responses", "gpt-4o-2024-08-06", "incomplete", "max_output_tokens", 0, 0, 0, None, 0, 4, 76, 0, 0),
    ("resp_llm_basic", "openai", "responses", "gpt-5.5-2026-04-23", "completed", "completed", 11, 5, 0, None, 0, 4, 4, 0, 0),
    ("resp_mcp_server_tool", "openai", "responses", "o4-mini-2025-04-16", "completed", "completed", 1401, 480, 0, None, 256, 10, 687, 0, 0),
    ("resp_openrouter_data_only", "openrouter", "responses", "openai/gpt-oss-20b", "completed", "completed", 78, 37, 0, None, 22, 5, 1, 85, 0),
    ("resp_reasoning_summary", "openai", "responses", "o3-mini-2025-01-31", "completed", "completed", 13, 1680, 0, None, 1408, 4, 1251, 2028, 0),
    ("resp_resume_starting_after", "openai", "responses", "gpt-4o-2024-08-06", "completed", "completed", 15, 9, 0, None, 0, 4, 15, 0, 0),
    ("resp_text", "openai", "responses", "gpt-4o-2024-08-06", "completed", "completed", 278, 9, 0, None, 0, 4, 31, 0, 0),
    ("resp_web_search", "openai", "responses", "gpt-5-2025-08-07", "completed", "completed", 9463, 582, 8320, None, 512, 13, 212, 0, 0),
    ("bedrock_converse_cache_read", "compatible", "bedrock_converse", "us.anthropic.claude-3-7-sonnet-20250219-v1:0", "completed", "end_turn", 12, 250, 1028, 0, None, 1, 1240, 0, 0),
    ("bedrock_converse_guardrail", "compatible", "bedrock_converse", "amazon.titan-text-express-v1", "refused", "guardrail_intervened", 17, 16, None, None, None, 1, 78, 0, 0),
    ("bedrock_converse_max_tokens", "compatible", "bedrock_converse", "amazon.titan-text-lite-v1", "incomplete", "max_tokens", 8, 10, None, None, None, 1, 24, 0, 0),
    ("bedrock_converse_server_tool", "compatible", "bedrock_converse", "us.amazon.nova-2-lite-v1:0", "completed", "tool_use", 1002, 59, None, None, None, 2, 0, 0, 1),
    ("bedrock_converse_thinking", "compatible", "bedrock_converse", "us.anthropic.claude-sonnet-4-20250514-v1:0", "completed", "end_turn", 36, 73, None, None, None, 1, 55, 193, 0),
    ("bedrock_converse_tool_use", "compatible", "bedrock_converse", "anthropic.claude-3-sonnet-20240229-v1:0", "completed", "tool_use", 259, 64, None, None, None, 1, 96, 0, 1),
    ("bedrock_invoke_anthropic_messages", "compatible", "bedrock_invoke", "anthropic.claude-3-sonnet-20240229-v1:0", "completed", "end_turn", 21, 22, None, None, None, 2, 76, 0, 0),
    ("bedrock_invoke_llama_length", "compatible", "bedrock_invoke", "meta.llama2-13b-chat-v1", "incomplete", "length", 10, 60, None, None, None, 0, 229, 0, 0),
    ("bedrock_invoke_nova_guardrail", "compatible", "bedrock_invoke", "amazon.nova-lite-v1:0", "completed", "end_turn", 30, 55, 0, 0, None, 1, 248, 0, 0),
    ("bedrock_invoke_titan_length", "compatible", "bedrock_invoke", "amazon.titan-tg1-large", "incomplete", "LENGTH", 18, 51, None, None, None, 0, 296, 0, 0),
    ("cc_crusoe_vllm_token_ids", "compatible", "chat_completions", "meta-llama/Llama-3.3-70B-Instruct", "completed", "stop", 46, 14, 0, None, None, 1, 13, 0, 0),
    ("cc_openai_moderation", "openai", "chat_completions", "gpt-5-2025-08-07", "completed", "stop", 13, 11, 0, None, 0, 1, 6, 0, 0),
    ("cohere_v2_text", "compatible", "cohere_chat", "command", "completed", "COMPLETE", 7, 109, None, None, None, 2, 383, 0, 0),
    ("cohere_v2_tool_calls", "compatible", "cohere_chat", "command-r", "completed", "TOOL_CALL", 62, 28, None, None, None, 1, 0, 56, 2),
    ("gemini_tool_call_thought_signature", "compatible", "gemini", "gemini-3-pro-preview", "completed", "STOP", 29, 212, None, None, 202, 0, 0, 0, 1),
    ("mistral_magistral_thinking", "compatible", "chat_completions", "magistral-medium-latest", "completed", "stop", 10, 232, None, None, None, 2, 607, 421, 0),
    ("msg_compaction", "anthropic", "messages", "claude-sonnet-4-6", "completed", "end_turn", 181, 8, 0, 0, None, 3, 8, 0, 0),
    ("msg_mcp_tool_use", "anthropic", "messages", "claude-sonnet-4-5-20250929", "completed", "end_turn", 3042, 354, 0, 0, None, 2, 806, 192, 0),
    ("ollama_chat_llama3", "compatible", "ollama", "llama3", "completed", "stop", 17, 50, None, None, None, 0, 212, 0, 0),
    ("ollama_generate_llama3", "compatible", "ollama", "llama3", "completed", "stop", 17, 71, None, None, None, 0, 291, 0, 0),
    ("resp_bedrock_mantle_function_call", "compatible", "responses", "openai.gpt-5.6-luna", "completed", "completed", 88, 14, 0, None, 0, 3, 0, 0, 1),
    ("resp_bedrock_mantle_text", "compatible", "responses", "openai.gpt-5.6-luna", "completed", "completed", 158, 32, 0, None, 10, 6, 70, 0, 0),
    ("vertex_flex_thought_tokens", "vertex", "gemini", "gemini-3-flash-preview", "completed", "STOP", 5, 101, None, None, 100, 0, 2, 0, 0),
    # Google's Interactions API (steps vocabulary): output adds total_thought_tokens back to
    # total_output_tokens; requires_action (a function call awaits its result) is completed;
    # a google_search_call is the server's tool, no call for the client.
    ("interactions_steps_function_call", "compatible", "interactions", "gemini-2.5-flash", "completed", "requires_action", 53, 80, 0, None, 65, 6, 0, 0, 1),
    ("interactions_steps_google_search", "compatible", "interactions", "gemini-2.5-flash", "completed", "completed", 220, 1763, 0, None, 1173, 6, 2406, 0, 0),
    ("interactions_steps_text", "compatible", "interactions", "gemini-2.5-flash", "completed", "completed", 7, 141, 0, None, 115, 6, 91, 0, 0),
]
# fmt: on


def analyse(stream: RealStream, profile: str | None = None) -> Analysis:
    """The stream fed as stored events, event i at i ms, under its host's profile."""
    an = Analyzer(
        method=stream.meta["request_method"],
        path=stream.meta["request_path"],
        request_body=stream.request_body or None,
        profile=profile or profile_for(stream.host),
    )
    for i, frame in enumerate(stream.frames()):
        an.feed_row(i, i * 1000, frame.type, frame.data, frame.raw)
    ctype = stream.meta["response_headers"].get("content-type")
    return an.finish(status=200, state="completed", response_content_type=ctype)


def test_the_table_covers_the_whole_corpus() -> None:
    assert sorted(row[0] for row in EXPECTED) == sorted(s.name for s in real_streams())
    assert len(EXPECTED) == 70


@pytest.mark.parametrize("row", EXPECTED, ids=[row[0] for row in EXPECTED])
def test_each_real_stream_reads_as_its_provider_documents_it(row: tuple[object, ...]) -> None:
    name, *want = row
    a = analyse(by_name(str(name)))
    first = None if a.ttft_us is None else a.ttft_us // 1000
    got = [
        a.profile, a.api, a.model, a.outcome, a.reason, a.input_tokens, a.output_tokens,
        a.cache_read_tokens, a.cache_write_tokens, a.reasoning_tokens, first,
        len(a.output_text), len(a.reasoning_text), len(a.tool_calls),
    ]  # fmt: skip
    assert got == want
    assert a.findings == []


def _final_response(stream: RealStream) -> dict[str, object]:
    """The response object of a Responses stream's terminal event."""
    parser = SseParser()
    events = parser.feed(stream.body) + parser.close()
    for ev in reversed(events):
        if ev.data and ev.data != "[DONE]":
            obj = orjson.loads(ev.data)
            if isinstance(obj.get("response"), dict):
                return obj["response"]  # type: ignore[no-any-return]
    raise AssertionError("no terminal response object")


@pytest.mark.parametrize("name", [s.name for s in real_streams() if s.meta["api"] == "responses"])
def test_responses_text_is_what_the_terminal_object_states(name: str) -> None:
    """Deltas assembled equal the final object's output text (and summaries its reasoning)."""
    stream = by_name(name)
    a = analyse(stream)
    final = _final_response(stream)
    output = final.get("output") or []
    assert isinstance(output, list)
    texts = [
        part["text"]
        for item in output
        if item.get("type") == "message"
        for part in item.get("content") or []
        if part.get("type") == "output_text"
    ]
    if final.get("status") != "failed":
        assert a.output_text == "".join(texts)
    summaries = [
        part["text"]
        for item in output
        if item.get("type") == "reasoning"
        for part in item.get("summary") or []
    ]
    if summaries:
        assert a.reasoning_text == "\n\n".join(summaries)


@pytest.mark.parametrize(
    "name", [s.name for s in real_streams() if s.meta["api"] == "chat_completions"]
)
def test_chat_text_is_choice_zeros_content(name: str) -> None:
    stream = by_name(name)
    parser = SseParser()
    content = []
    for ev in parser.feed(stream.body) + parser.close():
        if not ev.data or ev.data == "[DONE]":
            continue
        for choice in orjson.loads(ev.data).get("choices") or []:
            if choice.get("index", 0) == 0:
                content.append(_text_of((choice.get("delta") or {}).get("content")))
    assert analyse(stream).output_text == "".join(content)


def _text_of(content: object) -> str:
    """A delta's content: a string, or (Mistral) a list of typed parts whose text parts count."""
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if p.get("type") == "text")
    return content if isinstance(content, str) else ""


def test_the_seed_profile_still_says_what_the_seeds_say() -> None:
    """The gateway of the seed documents never sends summaries, queued or annotations:
    read under its profile, OpenAI's streams get the findings the seeds call for."""
    summary = analyse(by_name("resp_reasoning_summary"), profile="seed")
    assert {f.code for f in summary.findings} == {"never_arrives", "findings_truncated"}
    queued = analyse(by_name("resp_background_queued"), profile="seed")
    assert [f.code for f in queued.findings] == ["never_arrives"]
    failed = analyse(by_name("resp_error_failed_quota"), profile="seed")
    assert [f.code for f in failed.findings] == ["event_after_terminal"]
    # OpenAI itself never ends a Responses stream with [DONE]; OpenRouter does.
    done = analyse(by_name("resp_openrouter_data_only"), profile="openai")
    assert [f.detail for f in done.findings] == ["[DONE] arrived after the terminal."]
    assert analyse(by_name("resp_openrouter_data_only"), profile="openrouter").findings == []


def test_a_host_nothing_names_gets_no_false_finding_either() -> None:
    """The default profile (any unknown gateway) reads every real stream without a finding."""
    for stream in real_streams():
        assert analyse(stream, profile="compatible").findings == [], stream.name


@pytest.mark.parametrize("path", [None, "/gateway/route-7"])
@pytest.mark.parametrize(
    "name", [s.name for s in real_streams() if s.meta["api"] == "interactions"]
)
def test_interactions_streams_end_with_done_and_no_finding(name: str, path: str | None) -> None:
    """Google ends an Interactions stream with ``event: done`` / ``data: [DONE]`` after its
    terminal (google-genai's ``Stream`` stops reading at ``[DONE]``); the vercel/ai fixtures
    these were re-framed from keep the events only. With it, each reads as without it, and
    with no finding, on Google's path and behind a route that does not name the API."""
    stream = by_name(name)
    meta = {**stream.meta, "request_path": path or stream.meta["request_path"]}
    ended = replace(stream, meta=meta, wire=stream.wire + b"event: done\ndata: [DONE]\n\n")
    a, b = analyse(ended), analyse(stream)
    assert a.findings == []
    assert (a.api, a.outcome, a.reason, a.input_tokens, a.output_tokens, a.output_text) == (
        b.api, b.outcome, b.reason, b.input_tokens, b.output_tokens, b.output_text,
    )  # fmt: skip


def _json_events(stream: RealStream) -> list[dict[str, Any]]:
    parser = SseParser()
    events = parser.feed(stream.body) + parser.close()
    return [orjson.loads(ev.data) for ev in events if ev.data and ev.data != "[DONE]"]


def _messages_text(stream: RealStream) -> tuple[str, str]:
    """Anthropic: the text is every ``text_delta``'s ``text``, the reasoning every
    ``thinking_delta``'s ``thinking``, in order (Messages streaming docs)."""
    deltas = [e["delta"] for e in _json_events(stream) if e.get("type") == "content_block_delta"]
    text = "".join(d["text"] for d in deltas if d.get("type") == "text_delta")
    return text, "".join(d["thinking"] for d in deltas if d.get("type") == "thinking_delta")


def _gemini_text(stream: RealStream) -> tuple[str, str]:
    """Gemini: each chunk's first candidate's parts; a part with ``thought: true`` is a
    thought summary, the others with ``text`` the answer (generateContent docs)."""
    events = _json_events(stream) if stream.body.lstrip()[:1] != b"[" else orjson.loads(stream.body)
    parts = [
        p
        for e in events
        for c in (e.get("candidates") or [])[:1]
        for p in (c.get("content") or {}).get("parts") or []
        if "text" in p
    ]
    return (
        "".join(p["text"] for p in parts if not p.get("thought")),
        "".join(p["text"] for p in parts if p.get("thought")),
    )


def _cohere_text(stream: RealStream) -> tuple[str, str]:
    """Cohere v2: ``content-delta`` events' ``delta.message.content.text``; the reasoning is
    the ``tool_plan`` of ``tool-plan-delta`` events, "a chain-of-thought style reflection and
    plan" (chat-stream docs)."""
    events = _json_events(stream)
    text = [e["delta"]["message"]["content"].get("text", "")
            for e in events if e.get("type") == "content-delta"]  # fmt: skip
    plan = [e["delta"]["message"]["tool_plan"]
            for e in events if e.get("type") == "tool-plan-delta"]  # fmt: skip
    return "".join(text), "".join(plan)


TEXT_OF = {"messages": _messages_text, "gemini": _gemini_text, "cohere_chat": _cohere_text}


@pytest.mark.parametrize("name", [s.name for s in real_streams() if s.meta["api"] in TEXT_OF])
def test_text_and_reasoning_are_the_fields_the_provider_documents(name: str) -> None:
    """Whole texts, not lengths: what the provider's documented delta fields hold, joined."""
    stream = by_name(name)
    a = analyse(stream)
    assert (a.output_text, a.reasoning_text) == TEXT_OF[stream.meta["api"]](stream)
