"""Who failed: the rule (analysis.fault) and the analysis that applies it where it writes an
outcome."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from ssetape.analysis.analyzer import Analyzer
from ssetape.analysis.ending import NOT_RECORDED
from ssetape.analysis.fault import fault_of
from ssetape.analysis.findings import FindingCode
from ssetape.vocabulary import ANY_FAULT, Fault, fault_choices, faults_of, parse_fault

CONNECT = "[Errno 111] Connect call failed ('127.0.0.1', 9)"
CUT_H1 = (
    "HTTP/1 protocol error: peer closed connection without sending complete message body: "
    "incomplete chunked read"
)


@pytest.mark.parametrize(
    ("outcome", "state", "status", "error", "fault"),
    [
        # The provider: an error event, a 5xx (529: Anthropic overloaded), a rate limit, a cut.
        ("error", "completed", 200, None, Fault.PROVIDER),
        ("unresolved", "completed", 200, None, Fault.PROVIDER),
        ("http_error", "completed", 500, None, Fault.PROVIDER),
        ("http_error", "completed", 529, None, Fault.PROVIDER),
        ("http_error", "completed", 429, None, Fault.PROVIDER),
        ("cut", "truncated", 200, CUT_H1, Fault.PROVIDER),
        ("cut", "completed", 200, None, Fault.PROVIDER),  # no terminal event, nothing missed
        ("no_response", "failed", None, "Cannot parse HTTP response: bad", Fault.PROVIDER),
        ("no_response", "failed", None, "server closed connection", Fault.PROVIDER),
        # The client: a request refused, a client that went away (not a failure, but whose).
        ("http_error", "completed", 400, None, Fault.CLIENT),
        ("http_error", "completed", 401, None, Fault.CLIENT),
        ("http_error", "completed", 404, None, Fault.CLIENT),
        ("aborted", "aborted", 200, "Client disconnected.", Fault.CLIENT),
        # The network: no answer at all.
        ("no_response", "failed", None, CONNECT, Fault.NETWORK),
        ("no_response", "failed", None, "[Errno -2] Name or service not known", Fault.NETWORK),
        ("no_response", "failed", None, None, Fault.NETWORK),
        # ssetape: the recorder stopped, or its recording process died, first; the proxy's
        # own bound cut the response.
        (
            "interrupted",
            "interrupted",
            200,
            "recorder stopped before the exchange ended",
            "ssetape",
        ),
        ("cut", "truncated", 200, "Response body exceeds body_size_limit.", Fault.SSETAPE),
        # An HTTP error read while the recorder stopped is still the status's.
        ("http_error", "interrupted", 503, None, Fault.PROVIDER),
        # An error event before the recorder stopped: the provider's.
        ("error", "interrupted", 200, None, Fault.PROVIDER),
        # Not analysed yet: the transport tells.
        (None, "interrupted", 200, None, Fault.SSETAPE),
        (None, "interrupted", None, None, Fault.SSETAPE),
        (None, "failed", None, CONNECT, Fault.NETWORK),
        (None, "truncated", 200, CUT_H1, Fault.PROVIDER),
        (None, "completed", 502, None, Fault.PROVIDER),
        (None, "aborted", 200, None, Fault.CLIENT),
        # No failure: no fault.
        ("completed", "completed", 200, None, None),
        ("completed", "completed", 200, "4096 bytes not recorded: it fell behind", None),
        ("incomplete", "completed", 200, None, None),
        ("refused", "completed", 200, None, None),
        ("recording", "recording", 200, None, None),
        (None, "completed", 200, None, None),
    ],
)
def test_who_failed(
    outcome: str | None, state: str, status: int | None, error: str | None, fault: str | None
) -> None:
    assert fault_of(outcome, state, status, error) == fault


def test_faults_are_a_closed_vocabulary_with_a_one_line_error() -> None:
    assert fault_choices() == ["provider", "client", "network", "ssetape", "any"]
    assert faults_of(ANY_FAULT) == set(Fault) and faults_of("ssetape") == {"ssetape"}
    with pytest.raises(ValueError) as e:
        parse_fault("recorder")
    assert str(e.value) == (
        "fault 'recorder' is not one of provider, client, network, ssetape, any"
    )


def _chunk(delta: dict[str, Any], finish: str | None = None) -> str:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return orjson.dumps({"id": "c", "model": "gpt-4o", "choices": [choice]}).decode()


def _chat(events: list[str], **finish: Any) -> Any:
    a = Analyzer(method="POST", path="/v1/chat/completions", request_body=b'{"model":"gpt-4o"}')
    a.answered(200)
    for seq, data in enumerate(events):
        a.feed(seq, seq * 1000, None, data)
    return a.finish(status=200, response_content_type="text/event-stream", **finish)


def test_a_stream_relayed_whole_but_recorded_in_part_is_not_cut() -> None:
    """The recording process fell behind and the end went unrecorded: the proxy relayed the
    whole stream, so the provider did not cut it (the error and gap_seq say what is missing)."""
    head = [_chunk({"role": "assistant"}), _chunk({"content": "Hel"})]
    whole = _chat([*head, _chunk({}, "stop"), "[DONE]"], state="completed")
    assert (whole.outcome, whole.fault) == ("completed", None)
    lost = "123 bytes not recorded: the recording process fell behind"
    gap = _chat(head, state="completed", error=lost, gap_seq=2)
    assert (gap.outcome, gap.reason, gap.fault) == ("completed", NOT_RECORDED, None)
    assert FindingCode.NO_TERMINAL_EVENT not in [f.code for f in gap.findings]
    # The same stream without a gap: its provider ended it without a terminal.
    cut = _chat(head, state="completed")
    assert (cut.outcome, cut.reason, cut.fault) == ("cut", "no terminal event", "provider")
    # The proxy saw the upstream cut it: the provider's, gap or not.
    cut = _chat(head, state="truncated", error=CUT_H1, gap_seq=2)
    assert (cut.outcome, cut.fault) == ("cut", "provider")
    # The recorder stopped first: ssetape's, and a gap changes nothing there.
    stopped = _chat(head, state="interrupted", error="recorder stopped", gap_seq=2)
    assert (stopped.outcome, stopped.fault) == ("interrupted", "ssetape")
    # An error event the stream did carry is the provider's, whatever came after.
    error = _chunk({"content": "x"}, "error")
    assert _chat([*head, error], state="completed", gap_seq=3).outcome != "completed"


def test_an_http_error_is_read_with_whose_it_is() -> None:
    for status, fault in ((500, "provider"), (529, "provider"), (429, "provider"), (400, "client")):
        a = Analyzer(method="POST", path="/v1/messages", request_body=b'{"model":"claude"}')
        a.answered(status)
        body = b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'
        done = a.finish(status=status, state="completed", response_body=body)
        assert (done.outcome, done.fault) == ("http_error", fault), status
