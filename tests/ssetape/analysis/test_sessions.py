"""The session analysis on stored messages as the recorder stores them: Responses WebSocket
mode read by the Responses rules turn by turn, Realtime's beta names, and the registry."""

from __future__ import annotations

from typing import Any

import orjson

from ssetape.analysis.apis import api_names
from ssetape.analysis.request_text import MAX_PROMPT_BYTES
from ssetape.analysis.sessions import SESSION_APIS, SessionAnalyzer


def analyse(path: str, messages: list[tuple[str, int, dict[str, Any]]], **kw: Any) -> Any:
    a = SessionAnalyzer(path=path, query=kw.pop("query", ""), request_headers=kw.pop("headers", []))
    for seq, (direction, offset, obj) in enumerate(messages):
        a.message(seq, offset, direction, orjson.dumps(obj).decode())
    return a.finish(status=101, state=kw.pop("state", "completed"), error=kw.pop("error", None))


def responses_turn(start: int, text: str) -> list[tuple[str, int, dict[str, Any]]]:
    usage = {"input_tokens": 5, "output_tokens": 2, "total_tokens": 7,
             "input_tokens_details": {"cached_tokens": 1},
             "output_tokens_details": {"reasoning_tokens": 0}}  # fmt: skip
    rid = f"resp_{start}"
    return [
        ("client", start, {"type": "response.create", "model": "gpt-5-mini", "input": "hi"}),
        ("server", start + 50_000,
         {"type": "response.created", "response": {"id": rid, "model": "gpt-5-mini-2025"}}),
        ("server", start + 100_000, {"type": "response.output_text.delta", "delta": text[:1]}),
        ("server", start + 130_000, {"type": "response.output_text.delta", "delta": text[1:]}),
        ("server", start + 140_000, {"type": "response.completed",
         "response": {"id": rid, "status": "completed", "usage": usage}}),
    ]  # fmt: skip


def test_responses_websocket_mode_is_read_turn_by_turn() -> None:
    a = analyse("/v1/responses", responses_turn(0, "ab") + responses_turn(5_000_000, "cd"))
    assert (a.api, a.model, a.outcome) == ("responses", "gpt-5-mini-2025", "completed")
    assert (a.input_tokens, a.output_tokens, a.cache_read_tokens) == (10, 4, 2)
    assert a.output_text == "ab\ncd"  # one response a line
    assert (a.ttft_us, a.gap_max_us) == (100_000, 30_000)  # 5 s between turns: no gap
    assert a.session["ttft_us"] == [100_000, 100_000] and a.findings == []


def test_a_failed_response_makes_the_session_an_error() -> None:
    failed = {"type": "response.failed", "response": {"status": "failed",
              "error": {"code": "server_error", "message": "boom"}}}  # fmt: skip
    a = analyse("/v1/responses", [*responses_turn(0, "ab")[:3], ("server", 200_000, failed)])
    assert (a.outcome, a.reason, a.fault) == ("error", "server_error", "provider")
    assert [f.code for f in a.findings] == ["server_error"]


def test_realtime_beta_names_only_when_the_beta_was_asked() -> None:
    messages = [
        ("server", 0, {"type": "session.created", "session": {"model": "gpt-4o-realtime"}}),
        ("client", 10, {"type": "response.create"}),
        ("server", 20, {"type": "response.created", "response": {}}),
        ("server", 30, {"type": "response.text.delta", "delta": "Hi"}),
        ("server", 40, {"type": "response.audio.delta", "delta": "AAAA"}),
        ("server", 50, {"type": "response.done", "response": {"status": "completed"}}),
    ]
    beta = analyse("/v1/realtime", messages, headers=[["OpenAI-Beta", "realtime=v1"]])
    assert (beta.output_text, beta.ttft_us, beta.findings) == ("Hi", 20, [])
    assert beta.session["audio_deltas"] == 1 and beta.session["audio_base64_chars"] == 4
    ga = analyse("/v1/realtime", messages)
    assert ga.output_text == "" and ga.ttft_us is None
    assert sorted(f.detail for f in ga.findings) == [
        "Event type 'response.audio.delta' is not in the openai_realtime API.",
        "Event type 'response.text.delta' is not in the openai_realtime API.",
    ]


def test_the_first_server_message_names_the_api_on_an_unknown_route() -> None:
    hello = ("server", 0, {"type": "session.created", "session": {}})
    a = analyse("/gateway/ws", [hello], query="model=gpt-realtime")
    assert (a.api, a.model, a.outcome) == ("openai_realtime", "gpt-realtime", "completed")
    assert analyse("/gateway/ws", [("server", 0, {"hello": 1})]).api == "unknown"


def test_every_session_api_is_in_the_vocabulary() -> None:
    assert set(SESSION_APIS) <= set(api_names())


def test_a_sessions_prompt_is_what_its_client_frames_asked() -> None:
    """Search by prompt reads a session's client frames: Gemini Live's system instruction
    and turns, Responses WebSocket mode's input; never what the server said."""
    setup = {"setup": {"model": "models/gemini-live-2.5",
             "systemInstruction": {"parts": [{"text": "Answer in French."}]}}}  # fmt: skip
    turn = {"clientContent": {"turns": [{"role": "user", "parts": [{"text": "Hello?"}]}],
            "turnComplete": True}}  # fmt: skip
    spoken = {"realtimeInput": {"text": "And goodbye."}}
    answer = {"serverContent": {"modelTurn": {"parts": [{"text": "Bonjour"}]}}}
    path = "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent"
    messages = [("client", 0, setup), ("server", 5, {"setupComplete": {}}),
                ("client", 10, turn), ("server", 20, answer), ("client", 30, spoken)]  # fmt: skip
    a = analyse(path, messages)
    assert a.request_text == "Answer in French.\nHello?\nAnd goodbye."
    b = analyse("/v1/responses", responses_turn(0, "ab") + responses_turn(5_000_000, "cd"))
    assert b.request_text == "hi\nhi"


def test_a_long_sessions_prompt_keeps_its_start_and_its_end() -> None:
    """A session of hours asks again and again: its text stays bounded, the first and the
    latest asks kept."""
    asks = [
        ("client", i, {"type": "response.create", "input": f"ask {i:05d} " + "x" * 1000})
        for i in range(500)
    ]
    a = analyse("/v1/responses", asks)
    assert len(a.request_text.encode()) <= MAX_PROMPT_BYTES
    assert a.request_text.startswith("ask 00000 ") and "ask 00499 " in a.request_text
