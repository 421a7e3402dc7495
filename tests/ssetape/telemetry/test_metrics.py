"""The recorder's Prometheus registry, in process: what the recording process reports of each
stored exchange is counted once, under the GenAI conventions' names, labels and buckets;
the gaps are the analysis' gaps (docs/FIGURES.md); label values stay bounded."""

from __future__ import annotations

import dataclasses
import math

import orjson
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from ssetape.analysis.analyzer import Analyzer
from ssetape.recording.protocol import (
    Report,
    StoredExchange,
    StoreWrites,
    decode_report,
    encode_report,
)
from ssetape.recording.stored import BOUNDS_US, binned
from ssetape.telemetry.metrics import RecorderMetrics
from ssetape.telemetry.recorder_state import Sources

NO_GAPS = [0] * (len(BOUNDS_US) + 1)
COMPLETED = StoredExchange(
    api="chat_completions", model="gpt-4o", outcome="completed", fault=None, status=200,
    state="completed", host="api.openai.com", port=443, duration_us=2_500_000,
    ttft_us=300_000, input_tokens=11, output_tokens=40, gaps=NO_GAPS, gaps_us=0,
)  # fmt: skip
CUT = dataclasses.replace(
    COMPLETED, api="messages", model="claude-sonnet-4", outcome="cut", fault="provider",
    state="truncated", host="api.anthropic.com", input_tokens=None, output_tokens=None,
)  # fmt: skip


def metrics(**kw: object) -> RecorderMetrics:
    return RecorderMetrics(Sources(lambda: None, lambda: 2, lambda: None), **kw)  # type: ignore[arg-type]


def samples(m: RecorderMetrics) -> list[Sample]:
    body, content_type = m.render("")
    assert content_type.startswith("text/plain")
    return [s for f in text_string_to_metric_families(body.decode()) for s in f.samples]


def value(m: RecorderMetrics, name: str, **labels: str) -> float:
    """The sum over the series of ``name`` whose labels include ``labels``."""
    got = [s.value for s in samples(m) if s.name == name and labels.items() <= s.labels.items()]
    assert got, (name, labels)
    return sum(got)


def test_each_stored_exchange_counts_once_by_api_outcome_and_who_failed() -> None:
    m = metrics()
    m.hear(Report.STORED, [COMPLETED, COMPLETED, CUT])
    assert value(m, "ssetape_exchanges_total") == 3
    assert value(m, "ssetape_exchanges_total", outcome="completed", failed="false") == 2
    assert value(m, "ssetape_exchanges_total", api="messages", failed="true", fault="provider") == 1
    # The conventions' duration: error.type is the outcome of a failed one, absent otherwise.
    duration = "gen_ai_client_operation_duration_seconds_count"
    assert value(m, duration, error_type="cut", ssetape_fault="provider") == 1
    assert value(m, duration, gen_ai_provider_name="anthropic", gen_ai_operation_name="chat") == 1
    ok = [
        s for s in samples(m) if s.name == duration and s.labels["gen_ai_provider_name"] == "openai"
    ]
    assert [(s.labels["error_type"], s.value) for s in ok] == [("", 2)]
    assert value(m, "gen_ai_client_operation_duration_seconds_sum") == 7.5


def test_tokens_are_split_by_type_and_only_reported_counts_count() -> None:
    m = metrics()
    m.hear(Report.STORED, [COMPLETED, CUT])  # the cut one reported no usage
    tokens = "gen_ai_client_token_usage_tokens"
    assert value(m, tokens + "_sum", gen_ai_token_type="input") == 11
    assert value(m, tokens + "_sum", gen_ai_token_type="output") == 40
    assert value(m, tokens + "_count", gen_ai_token_type="output") == 1
    assert value(m, tokens + "_count", gen_ai_request_model="gpt-4o") == 2


def test_buckets_are_the_conventions_boundaries() -> None:
    m = metrics()
    m.hear(Report.STORED, [COMPLETED])
    les = {
        s.name: [] for s in samples(m) if s.name.endswith("_bucket")
    }  # fmt: skip
    for s in samples(m):
        if s.name in les:
            les[s.name].append(float(s.labels["le"]))
    seconds = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96,
               81.92, math.inf]  # fmt: skip
    assert les["gen_ai_client_operation_duration_seconds_bucket"] == seconds
    assert les["gen_ai_client_operation_time_to_first_chunk_seconds_bucket"] == seconds
    tokens = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216,
              67108864, math.inf]  # fmt: skip
    # Two series (input, output): the boundaries twice.
    assert les["gen_ai_client_token_usage_tokens_bucket"] == tokens * 2
    ttft = "gen_ai_client_operation_time_to_first_chunk_seconds_bucket"
    # 0.3 s: in the 0.32 bucket and every one above, not in 0.16.
    assert value(m, ttft, le="0.32") == 1 and value(m, ttft, le="0.16") == 0


def test_gaps_are_the_analysis_gaps_keep_alives_are_not_chunks() -> None:
    """time per output chunk: one observation per gap between content events, the same
    offsets the stored gap figures come from (docs/FIGURES.md)."""
    chunk = '{"id":"c","object":"chat.completion.chunk","model":"gpt-4o","choices":[%s]}'
    delta = chunk % '{"index":0,"delta":{"content":"hi"},"finish_reason":null}'
    an = Analyzer(method="POST", path="/v1/chat/completions", request_body=None)
    an.feed(0, 100_000, None, delta)  # TTFT 0.1 s
    an.feed(1, 115_000, None, delta)  # 15 ms
    an.feed(2, 600_000, None, None)  # a keep-alive comment: not content
    an.feed(3, 1_615_000, None, delta)  # 1.5 s: one gap, keep-alive or not
    an.feed(4, 1_620_000, None, chunk % '{"index":0,"delta":{},"finish_reason":"stop"}')
    an.feed(5, 1_621_000, None, "[DONE]")
    a = an.finish(status=200, state="completed")
    assert (a.ttft_us, a.gap_max_us) == (100_000, 1_500_000)
    gaps, total = binned(an.content_offsets)
    assert sum(gaps) == 2 and total == 1_515_000
    m = metrics()
    m.hear(Report.STORED, [dataclasses.replace(COMPLETED, gaps=gaps, gaps_us=total)])
    per_chunk = "gen_ai_client_operation_time_per_output_chunk_seconds"
    assert value(m, per_chunk + "_count") == 2
    assert value(m, per_chunk + "_sum") == 1.515
    assert value(m, per_chunk + "_bucket", le="0.02") == 1  # the 15 ms one
    assert value(m, per_chunk + "_bucket", le="1.28") == 1
    assert value(m, per_chunk + "_bucket", le="2.56") == 2  # the 1.5 s one


def test_models_past_the_top_n_are_other_and_hosts_are_opt_in() -> None:
    m = metrics(top_models=2)
    m.hear(Report.STORED, [dataclasses.replace(COMPLETED, model=f"m{i}") for i in range(5)])
    m.hear(Report.STORED, [dataclasses.replace(COMPLETED, model="m0")])
    count = "gen_ai_client_operation_duration_seconds_count"
    by_model = {s.labels["gen_ai_request_model"]: s.value for s in samples(m) if s.name == count}
    assert by_model == {"m0": 2, "m1": 1, "other": 3}
    assert not any("server_address" in s.labels for s in samples(m))
    with_hosts = metrics(hosts=True)
    with_hosts.hear(Report.STORED, [COMPLETED])
    assert value(with_hosts, count, server_address="api.openai.com", server_port="443") == 1


def test_an_exchange_stored_without_its_analysis_counts_by_its_transport() -> None:
    m = metrics()
    bare = StoredExchange(
        api=None, model=None, outcome=None, fault=None, status=None, state="failed",
        host="10.0.0.9", port=8000, duration_us=None, ttft_us=None, input_tokens=None,
        output_tokens=None, gaps=NO_GAPS, gaps_us=0,
    )  # fmt: skip
    m.hear(Report.STORED, [bare])
    assert value(m, "ssetape_exchanges_total", outcome="unanalysed", failed="true") == 1
    assert not [s for s in samples(m) if s.name.startswith("gen_ai_")]  # no duration stored


def test_store_writes_feed_the_write_histogram_the_queue_and_the_bytes() -> None:
    m = metrics()
    m.hear(Report.WRITES, StoreWrites(seconds=[0.002, 0.2], queued=120, stream_bytes=5000))
    m.hear(Report.WRITES, StoreWrites(seconds=[], queued=7, stream_bytes=300))
    assert value(m, "ssetape_store_write_duration_seconds_count") == 2
    assert value(m, "ssetape_store_write_duration_seconds_bucket", le="0.0025") == 1
    assert value(m, "ssetape_store_queue_rows") == 7
    assert value(m, "ssetape_stream_bytes_total") == 5300
    assert value(m, "ssetape_streams_in_flight") == 2


def test_the_reports_travel_as_json_lines() -> None:
    line = encode_report(Report.STORED, [COMPLETED, CUT])
    assert decode_report(line) == (Report.STORED, [COMPLETED, CUT])
    writes = StoreWrites([0.01], 3, 9)
    assert decode_report(encode_report(Report.WRITES, writes)) == (Report.WRITES, writes)
    newer = orjson.dumps({"stored": [{**dataclasses.asdict(COMPLETED), "new": 1}]})
    try:
        decode_report(newer)
        raise AssertionError("a key this version does not know must be an error")
    except ValueError as e:
        assert "bad stored report" in str(e)


def test_openmetrics_when_the_scraper_asks_for_it() -> None:
    m = metrics()
    m.hear(Report.STORED, [COMPLETED])
    body, content_type = m.render("application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    assert body.rstrip().endswith(b"# EOF")
