"""CPU per event of the recording process, and what each stage of it costs.

    python -m bench.bench_worker [--events 20000]

Feeds the messages `ssetape record`'s proxy would send for 10 chat streams straight into a
`RecordWorker` (SQLite in a temporary folder) and measures the process's CPU time (all
threads: parsing and analysis in the main thread, the writer's) until everything is
committed. Each stage is then switched off in turn; the difference is its cost:

- "no analysis": events go to the writer without `LiveAnalysis` seeing them;
- "no store": the writer drops event rows instead of storing them.
"""

from __future__ import annotations

import argparse
import datetime as dt
import tempfile
import time
from pathlib import Path
from typing import Any

from ssetape.storage.store import Store
from ssetape.storage.writer import Writer

from ssetape.live_analysis import LiveAnalysis
from ssetape.record_worker import RecordWorker

CHUNK = (
    b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o",'
    b'"choices":[{"index":0,"delta":{"content":"tok%d "},"finish_reason":null}]}\n\n'
)


def messages(events: int, streams: int = 10) -> list[tuple[Any, ...]]:
    fields = {"started_at": dt.datetime.now(dt.UTC), "method": "POST", "scheme": "http",
              "host": "h", "port": 1, "path": "/v1/chat/completions", "query": "",
              "http_version": "HTTP/1.1", "request_headers": [],
              "request_body": b'{"model":"gpt-4o","stream":true}', "fingerprint": "x"}  # fmt: skip
    head = {"status": 200, "is_stream": True,
            "response_headers": [["content-type", "text/event-stream"]]}  # fmt: skip
    out: list[tuple[Any, ...]] = []
    for s in range(streams):
        uid = f"u{s}"
        out += [("b", uid, dict(fields)), ("u", uid, dict(head)), ("s", uid, True, "")]
        out += [("c", uid, i, CHUNK % i) for i in range(events // streams)]
        out.append(("f", uid, events, {"state": "completed", "error": None}))
    return out


def cpu_per_event(events: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "worker.db")
        Store.open(db).close()
        worker = RecordWorker({"db": db, "max_pending": 10**7, "active": True})
        worker.start()
        msgs = messages(events)
        t = time.process_time()
        for m in msgs:
            worker.handle(m)
        worker.writer.flush(120)
        used = time.process_time() - t
        worker.stop()
    return used / events * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=20_000)
    args = ap.parse_args()
    base = cpu_per_event(args.events)
    add_events = LiveAnalysis.add_events
    LiveAnalysis.add_events = lambda self, uid, rows: self._sink.add_events(uid, rows)  # type: ignore[method-assign]
    no_analysis = cpu_per_event(args.events)
    LiveAnalysis.add_events = add_events  # type: ignore[method-assign]
    store = Writer.add_events
    Writer.add_events = lambda self, uid, rows: None  # type: ignore[method-assign]
    no_store = cpu_per_event(args.events)
    Writer.add_events = store  # type: ignore[method-assign]
    print(f"{args.events:,} chat events in 10 streams; CPU µs per event\n")
    print("| stage | µs per event |")
    print("|---|---:|")
    print(f"| everything | {base:.1f} |")
    analysis, storing = base - no_analysis, base - no_store
    print(f"| live analysis | {analysis:.1f} |")
    print(f"| storing (writer queue, batch, SQLite) | {storing:.1f} |")
    print(f"| the rest (message dispatch, SSE parsing, rows) | {base - analysis - storing:.1f} |")


if __name__ == "__main__":
    main()
