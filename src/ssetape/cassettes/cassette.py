"""Cassettes: recorded exchanges as JSON Lines, reviewable in a diff and lossless for replay.

Format version 1, one JSON object per line::

    {"ssetape_cassette": 1, "redact_fields": ["api_key"]}          header, always line 1
    {"kind": "exchange", "uid": "...", "started_at": "...", ...}   every exchanges column but id
    {"kind": "event", "seq": 0, "offset_us": 1234, "data": "...", "raw": "data: ...\\n\\n"}
    {"kind": "chunk", "seq": 0, "offset_us": 1234, "data": {"b64": "H4sI..."}}

Events and chunks belong to the exchange line above them. A bytes value is a JSON string when
it is valid UTF-8, else ``{"b64": "..."}``; datetimes are ISO 8601. Exchanges are ordered by
fingerprint, then by recording order (the order replay serves repeats in), so re-recording an
unchanged interaction changes only volatile values (uid, started_at, recorder, timings).

Compatibility policy: the columns of the store are written generically, so a newer ssetape may
add keys without a new format version; a reader ignores keys it does not know and says which.
Anything an older reader would misread needs a new version, and newer versions are refused.

Reading never executes anything (JSON only) and refuses malformed or oversized input with one
line naming the line number and what is wrong; an import is one transaction, all or nothing.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any
from urllib.parse import parse_qsl, urlencode

import orjson
from sqlalchemy import Connection, Select, Table, insert, select

from ssetape.analysis.knowledge import Indexer
from ssetape.cassettes.codec import TABLES, CassetteCodec, CassetteError, encode_bytes, short
from ssetape.files import private_file
from ssetape.redactor import DEFAULT_QUERY_PARAMS, Redactor
from ssetape.storage.store import Store

__all__ = ["Cassette", "CassetteError", "ImportReport", "encode_bytes", "write_cassette"]

FORMAT_VERSION = 1
MAX_LINE_BYTES = 64 * 1024 * 1024
MAX_BYTES = 4 * 1024 * 1024 * 1024
HEADER_KEY = "ssetape_cassette"

_EXCHANGES, _EVENTS, _CHUNKS = TABLES["exchange"], TABLES["event"], TABLES["chunk"]
_MASKED = re.compile(r"<redacted:[0-9a-f]{12}>")
_BATCH = 200

Progress = Callable[[int, int], None]  # (done, total)
Narrow = Callable[[Select[Any]], Select[Any]]  # adds WHERE clauses to a select of exchanges


@dataclass
class ImportReport:
    exchanges: int = 0
    events: int = 0
    chunks: int = 0
    skipped: int = 0  # uid already in the store
    ignored: dict[str, int] = field(default_factory=dict)  # unknown key -> first line
    redact_fields: list[str] = field(default_factory=list)
    lines: dict[int, int] = field(default_factory=dict)  # new exchange id -> cassette line


def scrubber(store: Store) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """Belt and braces before anything leaves the store: headers and query parameters that
    are secret by default and somehow are not masked yet get masked with the store's key
    (the recorder already did this; a store filled by other means may not have)."""
    key = store.setting("redaction_key")
    redactor = Redactor(bytes.fromhex(key) if key else secrets.token_bytes(32))

    def headers(pairs: Any) -> Any:
        if not isinstance(pairs, list):
            return pairs
        return [
            [k, v if _MASKED.search(v) else redactor.header_value(k, v)]
            if isinstance(p, list) and len(p) == 2 and isinstance(k := p[0], str)
            and isinstance(v := p[1], str) else p
            for p in pairs
        ]  # fmt: skip

    def query(q: Any) -> Any:
        if not isinstance(q, str) or not q:
            return q
        pairs = parse_qsl(q, keep_blank_values=True)
        if all(k.lower() not in DEFAULT_QUERY_PARAMS or _MASKED.fullmatch(v) for k, v in pairs):
            return q  # already clean: keep the exact recorded string
        return urlencode(
            [(k, v if _MASKED.fullmatch(v) else redactor.mask(v))
             if k.lower() in DEFAULT_QUERY_PARAMS else (k, v) for k, v in pairs]
        )  # fmt: skip

    def scrub(row: dict[str, Any]) -> dict[str, Any]:
        for name in ("request_headers", "response_headers"):
            if name in row:
                row[name] = headers(row[name])
        if "query" in row:
            row["query"] = query(row["query"])
        return row

    return scrub


class Cassette:
    """One cassette file: export a store's exchanges to it, or import it into a store."""

    def __init__(
        self, path: str | Path, *, max_line_bytes: int = MAX_LINE_BYTES, max_bytes: int = MAX_BYTES
    ) -> None:
        self.path = Path(path)
        self.max_line_bytes = max_line_bytes
        self.max_bytes = max_bytes
        self._read = 0  # bytes read so far, for progress bars

    # -- writing ---------------------------------------------------------------

    def export(
        self, store: Store, narrow: Narrow | None = None, *, progress: Progress | None = None
    ) -> int:
        """Write the store's exchanges (those ``narrow`` selects); returns how many."""
        try:
            with private_file(self.path) as out:
                return write_cassette(store, out, narrow, progress=progress)
        except OSError as e:
            raise CassetteError(f"cannot write {self.path}: {e.strerror or e}") from None

    # -- reading ---------------------------------------------------------------

    def records(
        self, report: ImportReport | None = None
    ) -> Generator[tuple[int, str, dict[str, Any]]]:
        """Validated (line number, kind, column values) of every line after the header.

        Unknown keys are dropped (and noted in ``report``); everything else that is wrong
        raises CassetteError naming the line.
        """
        report = report if report is not None else ImportReport()
        codecs = {kind: CassetteCodec(kind) for kind in TABLES}
        seen_uids: dict[str, int] = {}
        last_seq: dict[str, int | None] = {"event": None, "chunk": None}
        have_exchange = False
        lines = self._lines()
        header = next(lines, None)
        if header is None:
            raise CassetteError(
                f"{self.path}: empty file, not an ssetape cassette "
                f'(line 1 must be a header like {{"{HEADER_KEY}": {FORMAT_VERSION}}})'
            )
        report.redact_fields = self._header(*header)
        for number, raw in lines:
            where = f"{self.path}:{number}"
            obj = _parse(where, raw)
            if obj is None:
                continue
            kind = obj.pop("kind", None)
            if kind not in codecs:
                what = "unknown kind " + short(kind) if kind is not None else 'no "kind"'
                raise CassetteError(f'{where}: {what} (expected "exchange", "event" or "chunk")')
            values = codecs[kind].decode(obj, str(self.path), number, report.ignored)
            if kind == "exchange":
                uid = values["uid"]
                if uid in seen_uids:
                    raise CassetteError(
                        f"{where}: duplicate exchange uid {uid} (also on line {seen_uids[uid]})"
                    )
                seen_uids[uid] = number
                have_exchange = True
                last_seq = {"event": None, "chunk": None}
            else:
                if not have_exchange:
                    raise CassetteError(f"{where}: {kind} line before any exchange line")
                prev = last_seq[kind]
                if prev is not None and values["seq"] <= prev:
                    raise CassetteError(
                        f"{where}: {kind} seq {values['seq']} does not follow seq {prev}"
                    )
                last_seq[kind] = values["seq"]
            yield number, kind, values

    def _header(self, number: int, raw: bytes) -> list[str]:
        where = f"{self.path}:{number}"
        what = f'not an ssetape cassette (line 1 must be a header like {{"{HEADER_KEY}": 1}})'
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise CassetteError(f"{where}: {what}") from None
        if not isinstance(obj, dict) or HEADER_KEY not in obj:
            raise CassetteError(f"{where}: {what}")
        version = obj[HEADER_KEY]
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise CassetteError(f"{where}: bad cassette format version {short(version)}")
        if version > FORMAT_VERSION:
            raise CassetteError(
                f"{where}: cassette format version {version} is newer than this ssetape reads "
                f"({FORMAT_VERSION}): upgrade ssetape"
            )
        fields = obj.get("redact_fields", [])
        if not isinstance(fields, list) or not all(isinstance(f, str) for f in fields):
            raise CassetteError(f'{where}: "redact_fields" must be a list of strings')
        return list(fields)

    def _lines(self) -> Iterator[tuple[int, bytes]]:
        total = 0
        try:
            f = self.path.open("rb")
        except OSError as e:
            raise CassetteError(f"cannot read {self.path}: {e.strerror or e}") from None
        with f:
            number = 0
            while True:
                raw = f.readline(self.max_line_bytes + 1)
                if not raw:
                    return
                number += 1
                total += len(raw)
                self._read = total
                body = raw[:-1] if raw.endswith(b"\n") else raw
                if len(body) > self.max_line_bytes:
                    raise CassetteError(
                        f"{self.path}:{number}: line longer than {self.max_line_bytes} bytes "
                        "(raise the line limit if this cassette is trusted)"
                    )
                if total > self.max_bytes:
                    raise CassetteError(
                        f"{self.path}:{number}: cassette larger than {self.max_bytes} bytes "
                        "(raise the size limit if it is trusted)"
                    )
                yield number, body

    def import_into(self, store: Store, *, progress: Progress | None = None) -> ImportReport:
        """Add the cassette's exchanges to ``store`` in one transaction (all or nothing).

        Exchanges whose uid the store already has are skipped, so importing twice is
        harmless. The cassette's redacted fields join the store's, so later recordings and
        replays mask the same fields.
        """
        report = ImportReport()
        size = self._size()
        pending: tuple[int, dict[str, Any]] | None = None
        rows: dict[str, list[dict[str, Any]]] = {"event": [], "chunk": []}
        with store.engine.begin() as conn:
            for number, kind, values in self.records(report):
                if kind != "exchange":
                    rows[kind].append(values)
                    continue
                if pending is not None:
                    _insert(conn, report, *pending, rows)
                pending, rows = (number, values), {"event": [], "chunk": []}
                if progress is not None:
                    progress(min(self._read, size), size)
            if pending is not None:
                _insert(conn, report, *pending, rows)
        # Findings are not in cassettes, and a cassette from an older ssetape lacks the
        # knowledge columns: derive both here, as the recorder would have.
        Indexer(store).reindex(sorted(report.lines))
        if report.redact_fields:
            known: list[str] = orjson.loads(store.setting("redact_fields") or "[]")
            merged = sorted(set(known) | set(report.redact_fields))
            if merged != known:
                store.set_setting("redact_fields", orjson.dumps(merged).decode())
        if progress is not None:
            progress(size, size)
        return report

    def _size(self) -> int:
        try:
            return self.path.stat().st_size
        except OSError:
            return 0

    def check(self) -> ImportReport:
        """Validate the whole file without a store."""
        report = ImportReport()
        for _ in self.records(report):
            pass
        return report


def _parse(where: str, raw: bytes) -> dict[str, Any] | None:
    if not raw.strip():
        return None  # blank lines (an editor's trailing newline) carry nothing
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise CassetteError(f"{where}: invalid JSON ({str(e).splitlines()[0]})") from None
    if not isinstance(obj, dict):
        raise CassetteError(f"{where}: expected a JSON object, got {short(obj)}")
    return obj


def _insert(
    conn: Connection,
    report: ImportReport,
    number: int,
    values: dict[str, Any],
    rows: dict[str, list[dict[str, Any]]],
) -> None:
    if conn.execute(select(_EXCHANGES.c.id).where(_EXCHANGES.c.uid == values["uid"])).first():
        report.skipped += 1
        return
    xid = conn.execute(insert(_EXCHANGES).returning(_EXCHANGES.c.id), values).scalar_one()
    report.lines[xid] = number
    report.exchanges += 1
    for kind, table in (("event", _EVENTS), ("chunk", _CHUNKS)):
        if rows[kind]:
            conn.execute(insert(table), _uniform(table, rows[kind], xid))
    report.events += len(rows["event"])
    report.chunks += len(rows["chunk"])


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


def header_line(store: Store) -> bytes:
    fields = orjson.loads(store.setting("redact_fields") or "[]")
    return orjson.dumps({HEADER_KEY: FORMAT_VERSION, "redact_fields": fields}) + b"\n"


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
        out.write(header_line(store))
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
