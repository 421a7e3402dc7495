"""Moving recorded exchanges between a store and cassette lines (the "persister").

Exports read the store in batches and write lines with the codecs; imports insert what
:func:`~ssetape.cassettes.format.read_records` validated. Nothing here parses files.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import IO, Any

from sqlalchemy import Connection, Select, Table, insert, select, update

from ssetape.cassettes.codec import TABLES, CassetteCodec
from ssetape.cassettes.format import ImportReport, header_line
from ssetape.matching import canonical_request, fingerprint
from ssetape.redactor import Redactor
from ssetape.storage.store import Store

__all__ = [
    "Narrow",
    "Progress",
    "insert_exchange",
    "insert_rows",
    "redacted",
    "scrubber",
    "select_ids",
    "set_event_count",
    "write_cassette",
]

_EXCHANGES, _EVENTS, _CHUNKS = TABLES["exchange"], TABLES["event"], TABLES["chunk"]
_BATCH = 200

Progress = Callable[[int, int], None]  # (done, total)
Narrow = Callable[[Select[Any]], Select[Any]]  # adds WHERE clauses to a select of exchanges


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
    conn: Connection, report: ImportReport, number: int, values: dict[str, Any]
) -> int | None:
    """Insert one exchange (cassette line ``number``); its id, or None when the store has its
    uid already (noted in ``report``). Its events and chunks follow with :func:`insert_rows`,
    a batch at a time: an exchange's lines are never all held at once."""
    if conn.execute(select(_EXCHANGES.c.id).where(_EXCHANGES.c.uid == values["uid"])).first():
        report.skipped += 1
        return None
    xid: int = conn.execute(insert(_EXCHANGES).returning(_EXCHANGES.c.id), values).scalar_one()
    report.lines[xid] = number
    report.exchanges += 1
    return xid


def insert_rows(
    conn: Connection, report: ImportReport, kind: str, rows: list[dict[str, Any]], xid: int
) -> None:
    """A batch of exchange ``xid``'s events or chunks (``kind``)."""
    if rows:
        table = TABLES[kind]
        conn.execute(insert(table), _uniform(table, rows, xid))
    if kind == "event":
        report.events += len(rows)
    else:
        report.chunks += len(rows)


def set_event_count(conn: Connection, xid: int, count: int) -> None:
    """Cassettes from version 2 leave the count out: it is what the import inserted."""
    conn.execute(update(_EXCHANGES).where(_EXCHANGES.c.id == xid).values(event_count=count))


def _uniform(table: Table, rows: list[dict[str, Any]], xid: int) -> list[dict[str, Any]]:
    """Rows with the same keys: an executemany takes its columns from the first row only, so
    a key the first row lacks (an empty optional field) would be dropped from every row."""
    keys = set().union(*rows)
    defaults = {
        k: getattr(c.default, "arg", None)
        if c.default is not None and c.default.is_scalar
        else None
        for k, c in table.c.items()
        if k in keys
    }
    return [{**defaults, **r, "exchange_id": xid} for r in rows]


def select_ids(narrow: Narrow | None, *order: Any) -> Select[Any]:
    stmt = select(_EXCHANGES.c.id)
    return (narrow(stmt) if narrow is not None else stmt).order_by(*order)


def write_cassette(
    store: Store, out: IO[bytes], narrow: Narrow | None = None, *, progress: Progress | None = None
) -> int:
    """Write a whole cassette (header and lines) to ``out``; returns the exchange count."""
    codecs = {kind: CassetteCodec(kind) for kind in TABLES}
    scrub = scrubber(store)
    order = (_EXCHANGES.c.fingerprint, _EXCHANGES.c.started_at, _EXCHANGES.c.id)
    with store.engine.connect() as conn:
        ids = list(conn.execute(select_ids(narrow, *order)).scalars())
        out.write(header_line(store.redact_fields()))
        for start in range(0, len(ids), _BATCH):
            batch = ids[start : start + _BATCH]
            found = conn.execute(select(_EXCHANGES).where(_EXCHANGES.c.id.in_(batch)))
            exchanges = {r.id: dict(r._mapping) for r in found}
            children: dict[str, dict[int, list[dict[str, Any]]]] = {}
            for kind in ("event", "chunk"):
                table = TABLES[kind]
                q = select(table).where(table.c.exchange_id.in_(batch))
                q = q.order_by(table.c.exchange_id, table.c.seq)
                by_id: dict[int, list[dict[str, Any]]] = {}
                for r in conn.execute(q):
                    by_id.setdefault(r.exchange_id, []).append(dict(r._mapping))
                children[kind] = by_id
            for xid in batch:
                x = exchanges.get(xid)
                if x is None:
                    continue  # deleted while exporting
                uid = x["uid"]
                lines = [codecs["exchange"].encode(scrub(x), uid)]
                for kind in ("event", "chunk"):
                    lines += [codecs[kind].encode(r, uid) for r in children[kind].get(xid, [])]
                out.write(b"".join(lines))
            if progress is not None:
                progress(min(start + _BATCH, len(ids)), len(ids))
    return len(ids)
