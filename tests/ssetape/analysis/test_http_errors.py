"""An HTTP error response is an outcome, never a stream, whatever its content type claims:
``http_error``, labelled by the provider's own error code, with no finding about its form.

Gemini answers a bad key with HTTP 400, a JSON error body and ``content-type:
text/event-stream``; providers send 429s as an SSE ``data:`` line or as NDJSON. The rows below
are cut as the recorder cuts them (its framing, by content type) and fed as it feeds them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest

from ssetape.analysis.analyzer import MAX_ERROR_BODY, Analyzer
from ssetape.analysis.knowledge import Knowledge
from ssetape.framing.framings import FRAMINGS, framing_of
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from ssetape.storage.writer import Writer

GEMINI_400 = orjson.dumps(
    {
        "error": {
            "code": 400,
            "message": "API key not valid. Please pass a valid API key.",
            "status": "INVALID_ARGUMENT",
        }
    },
    option=orjson.OPT_INDENT_2,
)
GEMINI_PATH = "/v1beta/models/gemini-2.5-flash:streamGenerateContent"


def _rows(body: bytes, ctype: str) -> list[tuple[str | None, str | None, bytes]]:
    spec = FRAMINGS.get(framing_of(ctype))
    if spec is None:  # kept as its wire chunks
        return [(None, None, body[i : i + 7]) for i in range(0, len(body), 7)]
    parser = spec.parser(1 << 20)
    return [(f.type, f.data, f.raw) for f in [*parser.feed(body), *parser.close()]]


def _read(status: int, body: bytes, ctype: str, path: str = GEMINI_PATH) -> tuple[str, ...]:
    an = Analyzer(method="POST", path=path, request_body=b'{"contents": []}')
    an.answered(status)
    for seq, (event, data, raw) in enumerate(_rows(body, ctype)):
        an.feed_row(seq, seq * 1000, event, data, raw)
    a = an.finish(status=status, state="completed", response_content_type=ctype)
    return (a.outcome, a.reason, *(f.code for f in a.findings))


@pytest.mark.parametrize(
    ("path", "ctype"),
    [
        (GEMINI_PATH + "?alt=sse", "text/event-stream"),
        (GEMINI_PATH, "text/event-stream"),
        (GEMINI_PATH, "application/json; charset=UTF-8"),  # the array path, kept as chunks
    ],
)
def test_gemini_400_with_an_event_stream_type_is_an_http_error(path: str, ctype: str) -> None:
    assert _read(400, GEMINI_400, ctype, path) == ("http_error", "INVALID_ARGUMENT")


def test_an_error_sent_as_sse_or_ndjson_is_labelled_by_its_code() -> None:
    sse = b'data: {"error": {"type": "rate_limit_error", "code": "rate_limit_exceeded"}}\n\n'
    assert _read(429, sse, "text/event-stream", "/v1/chat/completions") == (
        "http_error",
        "rate_limit_exceeded",
    )
    ndjson = b'{"error": "model \\"llama9\\" not found, try pulling it first"}\n'
    got = _read(404, ndjson, "application/x-ndjson", "/api/chat")
    assert got == ("http_error", 'model "llama9" not found, try pulling it first')


def test_an_error_body_that_says_nothing_is_labelled_by_its_status() -> None:
    assert _read(503, b"upstream connect error\n", "text/event-stream") == ("http_error", "503")


def test_a_huge_error_stream_is_read_within_its_bound() -> None:
    """An upstream that streams megabytes with its 500 costs the analysis MAX_ERROR_BODY."""
    an = Analyzer(method="POST", path="/v1/chat/completions", request_body=None)
    an.answered(500)
    for seq in range(1000):
        an.feed_row(seq, seq, None, "x" * 4096, b"data: " + b"x" * 4096 + b"\n\n")
    assert len(an._error_body or b"") == MAX_ERROR_BODY
    a = an.finish(status=500, state="completed", response_content_type="text/event-stream")
    assert (a.outcome, a.reason, a.findings) == ("http_error", "500", [])


def test_a_stored_error_stream_reads_so_live_and_on_reindex(
    store: Store, exchange_fields: Callable[..., dict[str, Any]]
) -> None:
    """Recorded through the writer (the live analysis) and read again by `reindex`: the same."""
    knowledge = Knowledge(store)
    w = Writer(store, on_finished=knowledge.save_live)
    w.start()
    uid = "e" * 32
    try:
        fields = exchange_fields(
            host="generativelanguage.googleapis.com", path=GEMINI_PATH + "?alt=sse",
            request_body=b'{"contents": []}',
        )  # fmt: skip
        w.begin(uid, **fields)
        w.update(uid, status=400, response_headers=[["content-type", "text/event-stream"]])
        rows = _rows(GEMINI_400, "text/event-stream")
        w.add_events(uid, [(i, i * 1000, e, d, None, raw) for i, (e, d, raw) in enumerate(rows)])
        w.finish(uid, state="completed", status=400)
        assert w.flush()
    finally:
        w.close()
    x = Queries(store).exchange(uid)
    assert x is not None
    assert knowledge.update([x.id]) == 1
    x = Queries(store).exchange(uid)
    assert x is not None and (x.outcome, x.outcome_reason) == ("http_error", "INVALID_ARGUMENT")
    assert knowledge.findings(x.id) == []
