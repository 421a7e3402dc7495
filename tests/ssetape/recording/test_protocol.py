"""The vocabulary of the pipe between the proxy and its recording process, both directions."""

from __future__ import annotations

import io
import pickle
import re

import pytest

from ssetape.recording.protocol import (
    HEADER,
    Begin,
    Chunk,
    Close,
    Configure,
    Counts,
    FinalCounts,
    Finish,
    Gap,
    Lost,
    Message,
    Report,
    Stream,
    Unknown,
    Update,
    WorkerConfig,
    decode_report,
    encode_frame,
    encode_report,
    read_frames,
)


def test_frames_carry_batches_as_they_were_sent() -> None:
    batches: list[list[Message]] = [
        [Configure(WorkerConfig(db="x.db", max_pending=5, active=True))],
        [
            Begin("u1", {"method": "POST"}),
            Update("u1", {"status": 200}),
            Stream("u1", "sse", "gzip", 10, 20),
            Chunk("u1", 120, b"data: 1\n\n"),
            Gap("u1", 7, b"\n\n"),
            Finish("u1", 130, {"state": "completed"}),
            Lost(1, 2),
        ],
        [Close()],
    ]
    pipe = io.BytesIO(b"".join(encode_frame(b) for b in batches))
    got = list(read_frames(pipe))
    # The same values, of the same types: each end sees typed messages only.
    assert got == batches
    assert [[type(m) for m in b] for b in got] == [[type(m) for m in b] for b in batches]


def test_a_message_of_a_newer_proxy_reads_as_unknown() -> None:
    payload = pickle.dumps([("zz", "u1", 1), ("c", "u1", 1), ("close",)])  # a chunk, short
    got = list(read_frames(io.BytesIO(HEADER.pack(len(payload)) + payload)))
    assert got == [[Unknown("zz"), Unknown("c"), Close()]]


def test_a_cut_frame_ends_the_batches() -> None:
    whole = encode_frame([Close()])
    assert list(read_frames(io.BytesIO(whole + whole[:-1]))) == [[Close()]]


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        (Report.READY, "host:1:1764561600"),
        (Report.LOG, ["ssetape.recorder", 40, "boom"]),
        (Report.DONE, ["u1", "u2"]),
        (Report.COUNTS, Counts(events_recorded=3, last_error="disk full")),
        (Report.FINAL, FinalCounts(exchanges_recorded=1, saved=False, last_failure="x")),
    ],
)
def test_reports_read_back_as_sent(kind: Report, value: object) -> None:
    line = encode_report(kind, value)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert decode_report(line) == (kind, value)


@pytest.mark.parametrize(
    ("line", "error"),
    [
        (b"hello\n", "not a report: b'hello\\n'"),
        (b'{"ready": true, "log": []}\n', "not a report"),
        (b'{"gossip": 1}\n', "unknown report 'gossip'"),
        (b'{"counts": {"events_stored": 1}}\n', "bad counts report"),
    ],
)
def test_what_is_not_a_report_is_an_error_naming_it(line: bytes, error: str) -> None:
    with pytest.raises(ValueError, match=re.escape(error)):
        decode_report(line)


def test_counts_add_up_across_recording_processes() -> None:
    a = Counts(events_recorded=5, events_lost=1, last_error="first")
    b = Counts(events_recorded=2, exchanges_finished=1)
    assert a.plus(b) == Counts(
        events_recorded=7, events_lost=1, exchanges_finished=1, last_error="first"
    )
    assert a.plus(Counts(last_error="later")).last_error == "later"
