"""CPU per event of the recording process, and what each stage of it costs.

    python -m bench.bench_worker [--events 20000] [--streams 20] [--per-chunk 3]

Feeds the messages `ssetape record`'s proxy would send for ``--streams`` chat streams, with
``--per-chunk`` events in each relayed chunk (at full speed the proxy reads several at once),
straight into a
`RecordWorker` (SQLite in a temporary folder) and measures the process's CPU time (all
threads: parsing and analysis in the main thread, the writer's) until everything is
committed. Each stage is then switched off in turn; the difference is its cost:

- "no analysis": the analyzer ignores the events;
- "no store": the writer drops event rows instead of storing them;
- "no indexing": finished exchanges' analyses are not stored.
"""

from __future__ import annotations

import argparse
import datetime as dt
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ssetape.analysis.analyzer import Analyzer
from ssetape.analysis.knowledge import Knowledge
from ssetape.framing.framings import Framing
from ssetape.recording.capture import MAX_DECODED, MAX_EVENT
from ssetape.recording.protocol import Begin, Chunk, Finish, Stream, Update, WorkerConfig
from ssetape.recording.worker import RecordWorker, tune_gc
from ssetape.storage.store import Store
from ssetape.storage.writer import Writer

CHUNK = (
    b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o",'
    b'"choices":[{"index":0,"delta":{"content":"tok%d "},"finish_reason":null}]}\n\n'
)


BATCH = 400  # messages per batch from the proxy (its 50 ms at 25,000 events/s)


def messages(events: int, streams: int, per_chunk: int) -> list[tuple[Any, ...]]:
    fields = {"started_at": dt.datetime.now(dt.UTC), "method": "POST", "scheme": "http",
              "host": "h", "port": 1, "path": "/v1/chat/completions", "query": "",
              "http_version": "HTTP/1.1", "request_headers": [],
              "request_body": b'{"model":"gpt-4o","stream":true}', "fingerprint": "x"}  # fmt: skip
    head = {"status": 200, "is_stream": True,
            "response_headers": [["content-type", "text/event-stream"]]}  # fmt: skip
    out: list[Any] = []
    for s in range(streams):
        uid = f"u{s}"
        stream = Stream(uid, Framing.SSE.value, "", MAX_EVENT, MAX_DECODED)
        out += [Begin(uid, dict(fields)), Update(uid, dict(head)), stream]
        n = events // streams
        out += [
            Chunk(uid, i, b"".join(CHUNK % j for j in range(i, min(n, i + per_chunk))))
            for i in range(0, n, per_chunk)
        ]
        out.append(Finish(uid, events, {"state": "completed", "error": None}))
    return out


def cpu_per_event(events: int, streams: int, per_chunk: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "worker.db")
        Store.open(db).close()
        worker = RecordWorker(WorkerConfig(db=db, max_pending=10**7, active=True))
        worker.start()
        tune_gc()  # as the recording process does once started
        msgs = messages(events, streams, per_chunk)
        t = time.process_time()
        for start in range(0, len(msgs), BATCH):
            worker.handle_batch(msgs[start : start + BATCH])
        worker.writer.flush(120)
        used = time.process_time() - t
        worker.stop()
    return used / events * 1e6


@contextmanager
def without(cls: type, name: str, stand_in: Callable[..., Any]) -> Iterator[None]:
    original = getattr(cls, name)
    setattr(cls, name, stand_in)
    try:
        yield
    finally:
        setattr(cls, name, original)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--streams", type=int, default=20)
    ap.add_argument("--per-chunk", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3, help="runs per stage; the fastest counts")
    args = ap.parse_args()

    def measure() -> float:
        return min(
            cpu_per_event(args.events, args.streams, args.per_chunk) for _ in range(args.repeat)
        )

    measure()  # warm-up: imports, caches
    base = measure()
    with without(Analyzer, "feed", lambda self, *event: None):
        no_analysis = measure()
    with without(Writer, "add_events", lambda self, uid, rows: None):
        no_store = measure()
    with without(Knowledge, "save_live", lambda self, done: len(done)):
        no_index = measure()
    print(f"{args.events:,} chat events in {args.streams} streams, {args.per_chunk} per chunk; "
          "CPU µs per event\n")  # fmt: skip
    print("| stage | µs per event |")
    print("|---|---:|")
    print(f"| everything | {base:.1f} |")
    analysis, storing, indexing = base - no_analysis, base - no_store, base - no_index
    print(f"| live analysis | {analysis:.1f} |")
    print(f"| storing events (writer queue, batch, SQLite) | {storing:.1f} |")
    print(f"| storing analyses (knowledge) | {indexing:.1f} |")
    rest = base - analysis - storing - indexing
    print(f"| the rest (message dispatch, SSE parsing, rows) | {rest:.1f} |")


if __name__ == "__main__":
    main()
