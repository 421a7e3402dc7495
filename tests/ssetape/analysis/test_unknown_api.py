"""Streams of APIs ssetape does not model: their events are kept with their timing, and the
analysis says only that no API it models claimed them (``unknown_api``), never a protocol
finding, which only an API's own rules can give."""

from __future__ import annotations

from typing import Any

from ssetape.analysis.analyzer import Analyzer
from ssetape.analysis.findings import FindingCode
from tests.ssetape.analysis.streams import codes, run

ROUTE = "/agents/run-stream"
# A chat chunk as OpenAI sends it, which a stream of some other API may carry in its data.
CHUNK = {
    "id": "chatcmpl-1",
    "object": "chat.completion.chunk",
    "model": "gpt-4o",
    "choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}],
}


def test_a_stream_no_api_claims_at_its_start_stays_unknown() -> None:
    """An agent framework's stream (its own ``metadata``, ``data`` and ``end`` events) whose
    data is, later, a chat chunk: the chat rules do not take it over mid-stream (they would
    call it cut, without [DONE], its event names unknown)."""
    events: list[tuple[str | None, Any]] = [
        ("metadata", {"run_id": "run-1"}),
        ("data", CHUNK),
        ("data", {**CHUNK, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        ("end", None),
    ]
    a = run(ROUTE, events)
    assert (a.api, a.outcome, a.reason, a.output_text) == ("unknown", "completed", None, "")
    assert codes(a) == [FindingCode.UNKNOWN_API]
    # Its events are kept with their timing by the recorder; the analysis only notes why it
    # says nothing of them.
    assert a.findings[0].event_seq is None


def test_data_that_is_not_json_is_no_finding_when_the_api_is_unknown() -> None:
    a = run(ROUTE, [(None, "plain words"), ("tick", "{"), (None, "[1, 2]")])
    assert (a.api, a.outcome, codes(a)) == ("unknown", "completed", [FindingCode.UNKNOWN_API])


def test_a_whole_answer_of_an_unknown_api_gets_nothing_said_of_its_form() -> None:
    for body in (b"OK", b"[1, 2]", b'"text"'):
        an = Analyzer(method="GET", path="/healthz", request_body=None)
        a = an.finish(
            status=200, state="completed", response_body=body, response_content_type="text/plain"
        )
        assert (a.api, a.outcome, a.findings) == ("unknown", "completed", []), body


def test_an_http_error_or_no_answer_is_not_noted_as_an_unknown_stream() -> None:
    an = Analyzer(method="POST", path=ROUTE, request_body=None)
    an.answered(503)
    an.feed_row(0, 0, None, None, b"busy")
    a = an.finish(status=503, state="completed", response_content_type="text/event-stream")
    assert (a.outcome, a.findings) == ("http_error", [])
    gone = Analyzer(method="POST", path=ROUTE, request_body=None).finish(
        status=None, state="failed"
    )
    assert (gone.outcome, gone.findings) == ("no_response", [])


def test_a_modelled_api_behind_an_unknown_route_is_still_read() -> None:
    a = run(ROUTE, [(None, CHUNK), (None, "[DONE]")])
    assert (a.api, a.outcome, a.output_text, a.findings) == (
        "chat_completions", "completed", "Hi", [],
    )  # fmt: skip
