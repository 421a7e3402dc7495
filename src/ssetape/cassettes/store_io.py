"""Moving recorded exchanges between a store and cassette lines (the "persister").

Exports read the store in batches and write lines with the codecs; imports insert what
:func:`~ssetape.cassettes.format.read_records` validated. Nothing here parses files.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from itertools import islice
from typing import IO, Any

from ssetape.cassettes.codec import CassetteCodec
from ssetape.cassettes.format import ImportReport, header_line
from ssetape.matching import canonical_request, fingerprint
from ssetape.redactor import Redactor
from ssetape.storage.cassette_rows import KINDS, CassetteRows, Inserts, Narrow
from ssetape.storage.session_io import holds_sessions
from ssetape.storage.store import Store

__all__ = [
    "Narrow",
    "Progress",
    "insert_exchange",
    "insert_rows",
    "redacted",
    "scrubber",
    "write_cassette",
]

_BATCH = 200
_LINES = 256  # cassette lines written at once

Progress = Callable[[int, int], None]  # (done, total)


def scrubber(store: Store) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """Belt and braces before anything leaves the store: headers and query parameters that
    are secret by default and somehow are not masked yet get masked with the store's key
    (the recorder already did this; a store filled by other means may not have)."""
    key = store.setting("redaction_key")
    redactor = Redactor(bytes.fromhex(key) if key else secrets.token_bytes(32))
    return lambda row: redacted(row, redactor)


def redacted(row: dict[str, Any], redactor: Redactor) -> dict[str, Any]:
    """``row`` (an exchange's columns) with what ``redactor`` masks masked, as the recorder
    would have stored it; masks already there stay as they are. A masked request gets the
    fingerprint a replay of it computes, or it would never match."""
    for name in ("request_headers", "response_headers"):
        if _pairs(row.get(name)):
            row[name] = redactor.headers_list(row[name])
    query, body = row.get("query"), row.get("request_body")
    if isinstance(query, str):
        row["query"] = redactor.query(query)
    if isinstance(body, bytes):
        encoding = next(
            (v for k, v in row.get("request_headers") or () if k.lower() == "content-encoding"),
            "",
        )
        row["request_body"] = redactor.body(body, encoding)
    if (row.get("query"), row.get("request_body")) != (query, body) and _request_known(row):
        canon = canonical_request(
            row["method"], row["host"], row["path"], row.get("query") or "", row["request_body"]
        )
        row["fingerprint"] = fingerprint(canon)
    return row


def _pairs(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(s, str) for s in p) for p in value
    )


def _request_known(row: dict[str, Any]) -> bool:
    return all(isinstance(row.get(k), str) for k in ("method", "host", "path"))


def insert_exchange(
    inserts: Inserts, report: ImportReport, number: int, values: dict[str, Any]
) -> int | None:
    """Insert one exchange (cassette line ``number``); its id, or None when the store has its
    uid already (noted in ``report``). Its events and chunks follow with :func:`insert_rows`,
    a batch at a time: an exchange's lines are never all held at once."""
    xid = inserts.exchange(values)
    if xid is None:
        report.skipped += 1
        return None
    report.lines[xid] = number
    report.exchanges += 1
    return xid


def insert_rows(
    inserts: Inserts, report: ImportReport, kind: str, rows: list[dict[str, Any]], xid: int
) -> None:
    """A batch of exchange ``xid``'s events or chunks (``kind``)."""
    inserts.rows(kind, rows, xid)
    if kind == "event":
        report.events += len(rows)
    else:
        report.chunks += len(rows)


def write_cassette(
    store: Store, out: IO[bytes], narrow: Narrow | None = None, *,
    progress: Progress | None = None, store_ids: bool = False,
) -> int:  # fmt: skip
    """Write a whole cassette (header and lines) to ``out``; returns the exchange count. A
    batch of exchanges is held at a time, and of their events those that fit the budget
    together, or one page of a long stream: never a whole million-event exchange.
    ``store_ids``: each exchange line says its id in the store (`ssetape export`: a line leads
    back to `ssetape show ID`); a test's cassette has none, so that its lines do not change
    with the store it was written from."""
    codecs = {kind: CassetteCodec(kind) for kind in KINDS}
    scrub = scrubber(store)
    rows = CassetteRows(store)
    ids = rows.ids(narrow, "request")
    # Version 3 only when a WebSocket session is among them: others stay as they were. (A
    # session is an HTTP exchange until its 101: one upgraded after this is written in the
    # version said here, with the fields an older reader ignores.)
    sessions = bool(ids) and holds_sessions(store, narrow, up_to=max(ids))
    out.write(header_line(store.redact_fields(), sessions=sessions))
    for start in range(0, len(ids), _BATCH):
        batch = ids[start : start + _BATCH]
        exchanges = rows.exchanges(batch)
        present = [xid for xid in batch if xid in exchanges]  # not deleted while exporting
        events, chunks = rows.children("event", present), rows.children("chunk", present)
        for (xid, its_events), (_, its_chunks) in zip(events, chunks, strict=True):
            x = exchanges[xid]
            uid = x["uid"]
            out.write(codecs["exchange"].encode(scrub(x), uid, store_id=store_ids))
            for kind, children in (("event", its_events), ("chunk", its_chunks)):
                encode = codecs[kind].encode
                rows_of = rows.pages(kind, xid) if children is None else children
                for line in _chunked((encode(r, uid) for r in rows_of), _LINES):
                    out.write(line)
        if progress is not None:
            progress(min(start + _BATCH, len(ids)), len(ids))
    return len(ids)


def _chunked(lines: Iterator[bytes], n: int) -> Iterator[bytes]:
    """Lines joined ``n`` at a time: fewer writes, a bounded buffer."""
    while block := list(islice(lines, n)):
        yield b"".join(block)
