"""Synthetic tapes of any size, written straight into a store (no proxy, no simulator).

Each exchange is what `ssetape record` stores for a chat completion: its request, its
fingerprint as replay computes it, and (for streams) events at exact offsets, so a replay's
timing can be compared with the offsets themselves.
"""

from __future__ import annotations

import datetime as dt
import secrets
from typing import Any, cast

import orjson
from sqlalchemy import Table, insert

from ssetape.matching import canonical_request, fingerprint
from ssetape.storage.models import Event, Exchange
from ssetape.storage.store import Store

HOST = "api.example.test"
PATH = "/v1/chat/completions"


def chat_body(text: str, *, stream: bool) -> bytes:
    return orjson.dumps(
        {"model": "gpt-4o-mini", "stream": stream, "messages": [{"role": "user", "content": text}]}
    )


def _exchange(body: bytes, *, events: int, duration_us: int) -> dict[str, Any]:
    return {
        "uid": secrets.token_hex(16), "started_at": dt.datetime.now(dt.UTC),
        "method": "POST", "scheme": "https", "host": HOST, "port": 443, "path": PATH,
        "query": "", "http_version": "HTTP/1.1",
        "request_headers": [["content-type", "application/json"]], "request_body": body,
        "fingerprint": fingerprint(canonical_request("POST", HOST, PATH, "", body)),
        "status": 200, "reason": "OK",
        "response_headers": [["content-type", "text/event-stream"]],
        "is_stream": True, "state": "completed", "ttfb_us": 1000,
        "duration_us": duration_us, "event_count": events,
    }  # fmt: skip


def build_tape(db: str, *, exchanges: int, events: int, gap_us: int) -> tuple[bytes, list[int]]:
    """A store of ``exchanges`` recorded streams; returns the request body of the first one
    (``events`` events ``gap_us`` apart) and its offsets. The others have 3 events each."""
    events_t = cast(Table, Event.__table__)
    exchanges_t = cast(Table, Exchange.__table__)
    offsets = [2000 + i * gap_us for i in range(events)]
    timed = chat_body("timed", stream=True)
    with Store.open(db) as store, store.engine.begin() as conn:
        for start in range(0, exchanges, 1000):
            rows = [
                _exchange(
                    timed if n == 0 else chat_body(f"tape {n}", stream=True),
                    events=events if n == 0 else 3,
                    duration_us=offsets[-1] + 1000 if n == 0 else 5000,
                )
                for n in range(start, min(exchanges, start + 1000))
            ]
            stmt = insert(exchanges_t).returning(exchanges_t.c.id, sort_by_parameter_order=True)
            ids = conn.execute(stmt, rows).scalars()
            kids = []
            for n, xid in zip(range(start, start + len(rows)), ids, strict=True):
                offs = offsets if n == 0 else [2000, 3000, 4000]
                kids += [
                    {"exchange_id": xid, "seq": i, "offset_us": off, "data": f'{{"i":{i}}}',
                     "raw": b'data: {"i":%d}\n\n' % i}
                    for i, off in enumerate(offs)
                ]  # fmt: skip
            conn.execute(insert(events_t), kids)
    return timed, offsets


def build_stream(
    db: str, *, events: int, headers: int = 1, gap_us: int = 10, text: str = "long", pad: int = 0
) -> int:
    """One recorded stream (its request ``chat_body(text)``) of ``events`` events ``gap_us``
    apart, each ``pad`` bytes longer than a tiny chunk, its response with ``headers``
    headers; written in big batches (2M events in a few seconds). Returns its id."""
    offsets_end = 1000 + events * gap_us
    row = _exchange(chat_body(text, stream=True), events=events, duration_us=offsets_end)
    row["response_headers"] = [["content-type", "text/event-stream"]] + [
        [f"x-h{i}", f"value {i}"] for i in range(headers - 1)
    ]
    exchanges_t = cast(Table, Exchange.__table__)
    fill = "x" * pad
    sql = "INSERT INTO events (exchange_id, seq, offset_us, event, data, raw) VALUES (?,?,?,?,?,?)"
    with Store.open(db) as store, store.engine.begin() as conn:
        xid = conn.execute(insert(exchanges_t).returning(exchanges_t.c.id), row).scalar_one()
        for start in range(0, events, 100_000):
            batch = []
            for i in range(start, min(events, start + 100_000)):
                data = f'{{"i":{i}{fill}}}'
                batch.append((xid, i, 1000 + i * gap_us, None, data, f"data: {data}\n\n".encode()))
            conn.exec_driver_sql(sql, batch)  # type: ignore[arg-type]
    return int(xid)
