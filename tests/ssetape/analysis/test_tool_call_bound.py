"""A stream may open any number of tool calls: the first MAX_TOOL_CALLS are kept whole and
stored, every one is counted (`tool_calls_total`), and nothing else of the rest is kept."""

from __future__ import annotations

from pathlib import Path

import orjson

from bench.bench_tool_calls import tool_call_stream
from ssetape.analysis.analyzer import Analyzer
from ssetape.analysis.tool_calls import MAX_TOOL_CALLS
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store

CALLS = 2_500


def test_a_stream_of_many_tool_calls_stores_the_first_ones_and_counts_them_all(
    tmp_path: Path,
) -> None:
    with Store.open(f"sqlite:///{tmp_path}/calls.db") as store:
        xid = tool_call_stream(store, CALLS)
        x = Queries(store).exchange(xid)
    assert x is not None and x.details is not None
    calls = x.details["tool_calls"]
    assert x.details["tool_calls_total"] == CALLS
    assert len(calls) == MAX_TOOL_CALLS
    assert calls[0] == {"id": "call_0", "name": "f", "arguments": '{"i":0}'}
    assert calls[-1]["id"] == f"call_{MAX_TOOL_CALLS - 1}"
    assert x.outcome == "completed" and x.outcome_reason == "tool_calls"


def _gemini(calls: int) -> Analyzer:
    """A Gemini stream of ``calls`` function calls without ids (keyed by their number)."""
    path = "/v1beta/models/gemini-2.0-flash:streamGenerateContent"
    a = Analyzer(method="POST", path=path, request_body=b"{}")
    for i in range(calls):
        part = {"functionCall": {"name": "f", "args": {"i": i}}}
        chunk = {"candidates": [{"content": {"role": "model", "parts": [part]}}]}
        a.feed(i, 1000 + i, None, orjson.dumps(chunk).decode())
    end = {"candidates": [{"content": {"parts": []}, "finishReason": "STOP"}],
           "usageMetadata": {"promptTokenCount": 1, "candidatesTokenCount": 2}}  # fmt: skip
    a.feed(calls, 1000 + calls, None, orjson.dumps(end).decode())
    return a


def test_calls_named_by_their_number_are_each_counted_past_the_bound() -> None:
    a = _gemini(MAX_TOOL_CALLS + 300).finish(status=200, state="completed")
    assert a.tool_calls_total == MAX_TOOL_CALLS + 300
    assert len(a.tool_calls) == MAX_TOOL_CALLS
    assert a.tool_calls[-1]["arguments"] == f'{{"i":{MAX_TOOL_CALLS - 1}}}'


def test_a_few_calls_are_all_kept() -> None:
    a = _gemini(3).finish(status=200, state="completed")
    assert a.tool_calls_total == 3
    assert [c["arguments"] for c in a.tool_calls] == ['{"i":0}', '{"i":1}', '{"i":2}']
