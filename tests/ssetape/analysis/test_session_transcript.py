"""A session's transcript as a user reads it (`show`, the web page, MCP, search): one line per
response, whatever the API, and what a cut session said so far, lane by lane (issue 42)."""

from __future__ import annotations

from typing import Any

import orjson

from ssetape.analysis.sessions import SessionAnalyzer
from ssetape.analysis.turns import SessionTurns, TurnScan
from tests.ssetape.analysis.test_sessions import analyse, responses_turn

Message = tuple[str, int, dict[str, Any]]
GEMINI = "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent"


def lane_event(lane: str, at: int, kind: str, **fields: Any) -> Message:
    return ("server", at, {"type": kind, **fields, "stream_id": lane})


def two_lanes_cut() -> list[Message]:
    """Two responses asked at once (lanes a and b), their deltas interleaved, and the socket
    cut before either completed."""
    asks: list[Message] = [
        ("client", 0, {"type": "response.create", "model": "gpt-5-mini", "input": "one",
                       "stream_id": "a"}),
        ("client", 10, {"type": "response.create", "model": "gpt-5-mini", "input": "two",
                        "stream_id": "b"}),
    ]  # fmt: skip
    created = [
        lane_event(lane, at, "response.created", response={"id": f"resp_{lane}",
                   "model": "gpt-5-mini-2025"})
        for lane, at in (("a", 100), ("b", 110))
    ]  # fmt: skip
    deltas = [
        lane_event(lane, at, "response.output_text.delta", delta=text)
        for lane, at, text in (("a", 200, "Alpha "), ("b", 210, "Beta "), ("a", 300, "one"),
                               ("b", 310, "two"))
    ]  # fmt: skip
    return asks + created + deltas


def turns_of(path: str, messages: list[Message], *, state: str) -> SessionTurns:
    scan = TurnScan(path=path, query="", request_headers=[], profile=None)
    for seq, (direction, offset, obj) in enumerate(messages):
        scan.message(seq, offset, direction, orjson.dumps(obj).decode())
    return scan.finish(state=state, error=None, end_us=1_000)


def test_a_cut_during_two_lanes_keeps_each_lanes_text_so_far() -> None:
    a = analyse("/v1/responses", two_lanes_cut(), state="truncated")
    assert (a.outcome, a.model) == ("cut", "gpt-5-mini-2025")
    # Each lane's text stays whole (never interleaved), one response a line, as they began.
    assert a.output_text == "Alpha one\nBeta two"
    turns = turns_of("/v1/responses", two_lanes_cut(), state="truncated").turns
    assert [(t.outcome, t.end_seq, t.content_frames) for t in turns] == [("cut", None, 2)] * 2


def test_a_cut_lane_follows_the_responses_that_completed() -> None:
    """One lane completed, the other was cut: the completed response, then the text so far."""
    done = lane_event("a", 400, "response.completed",
                      response={"id": "resp_a", "status": "completed"})  # fmt: skip
    a = analyse("/v1/responses", [*two_lanes_cut(), done], state="truncated")
    assert a.output_text == "Alpha one\nBeta two"
    turns = turns_of("/v1/responses", [*two_lanes_cut(), done], state="truncated").turns
    assert [t.outcome for t in turns] == ["completed", "cut"]


def test_while_lanes_stream_the_text_so_far_is_there() -> None:
    """The recording process reads the analysis as the session goes on: both lanes' text is
    in it before either completed, and reading it changes nothing."""
    s = SessionAnalyzer(path="/v1/responses", query="", request_headers=[])
    for seq, (direction, offset, obj) in enumerate(two_lanes_cut()):
        s.message(seq, offset, direction, orjson.dumps(obj).decode())
    for _ in range(2):
        a = s.finish(status=101, state="recording")
        assert (a.outcome, a.output_text) == ("recording", "Alpha one\nBeta two")


def test_responses_are_one_line_each() -> None:
    """Two responses that both said "Hello there!" read as two lines, not one run-on."""
    a = analyse(
        "/v1/responses",
        responses_turn(0, "Hello there!") + responses_turn(5_000_000, "Hello there!"),
    )
    assert a.output_text == "Hello there!\nHello there!"


def test_realtime_responses_are_one_line_each_and_a_cut_keeps_the_last_so_far() -> None:
    def response(at: int, *deltas: str, done: bool = True) -> list[Message]:
        said: list[Message] = [
            ("client", at, {"type": "response.create"}),
            ("server", at + 1, {"type": "response.created", "response": {}}),
        ]
        said += [("server", at + 2 + i, {"type": "response.output_audio_transcript.delta",
                                         "delta": d}) for i, d in enumerate(deltas)]  # fmt: skip
        if done:
            said.append(
                ("server", at + 9, {"type": "response.done", "response": {"status": "completed"}})
            )
        return said

    audio_only = response(50)
    audio_only.insert(2, ("server", 52, {"type": "response.output_audio.delta", "delta": "AA"}))
    messages = response(0, "Hi", " there") + audio_only + response(100, "How", " are")
    a = analyse("/v1/realtime", messages)
    # A response that only spoke (no transcript) adds no empty line.
    assert a.output_text == "Hi there\nHow are"
    cut = analyse("/v1/realtime", messages + response(200, "Bye", done=False), state="truncated")
    assert (cut.outcome, cut.output_text) == ("cut", "Hi there\nHow are\nBye")


def test_gemini_live_turns_are_one_line_each() -> None:
    def turn(at: int, *parts: str) -> list[Message]:
        ask = {"clientContent": {"turns": [{"role": "user", "parts": [{"text": "?"}]}],
                                 "turnComplete": True}}  # fmt: skip
        said: list[Message] = [("client", at, ask)]
        said += [("server", at + 1 + i, {"serverContent": {"modelTurn": {"parts": [{"text": p}]}}})
                 for i, p in enumerate(parts)]  # fmt: skip
        said.append(("server", at + 9, {"serverContent": {"turnComplete": True}}))
        return said

    a = analyse(GEMINI, turn(0, "Bon", "jour") + turn(100, "Salut"))
    assert a.output_text == "Bonjour\nSalut"
