"""The cassette format (version 2, or 3 with WebSocket sessions): JSON Lines, reviewable in a
diff and lossless for replay.

One JSON object per line::

    {"ssetape_cassette": 2, "redact_fields": ["api_key"]}          header, always line 1
    {"kind": "exchange", "method": "POST", "host": "...", ...}     the request and response
    {"kind": "event", "seq": 0, "offset_us": 1234, "raw": "data: ...\\n\\n"}
    {"kind": "chunk", "seq": 0, "offset_us": 1234, "data": {"b64": "H4sI..."}}

A cassette that holds a WebSocket session is version 3: the session is an exchange line (its
upgrade) and its messages are event lines with a direction and an opcode
(:mod:`ssetape.cassettes.sessions`); one without is written as version 2, byte for byte.

Events and chunks belong to the exchange line above them. A bytes value is a JSON string when
it is valid UTF-8, else ``{"b64": "..."}``; datetimes are ISO 8601. Exchanges are ordered by
fingerprint, then by recording order (the order replay serves repeats in). `ssetape export`
writes each exchange's id in its store right after its kind (``{"kind": "exchange", "id": 12,
...}``: `ssetape show 12` there); reading leaves it out, of the row and of its uid.

What is written is what was recorded and nothing derived from it (``codec.NOT_WRITTEN``), so
re-recording an unchanged interaction changes only timing values, and each event's bytes
appear once: an event's type, data and id are parsed from its raw bytes on reading, its
exchange's analysis is made again on import, its event count counted. An exchange's uid is
the hash of its line (importing a cassette twice adds nothing), its start the moment of the
import. Version 1 (which wrote all of these) still reads.

Compatibility policy: the columns of the store are written generically, so a newer ssetape may
add keys without a new format version; a reader ignores keys it does not know and says which.
Anything an older reader would misread needs a new version, and newer versions are refused.

This module is the pure part (the "serializer"): lines in, validated rows out, and the header
line out. Reading never executes anything (JSON only) and refuses malformed input with one line
naming the line number and what is wrong. :mod:`ssetape.cassettes.store_io` moves rows between
cassettes and stores; :class:`~ssetape.cassettes.cassette.Cassette` is the file.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from collections import Counter
from collections.abc import Generator, Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from ssetape.cassettes.codec import CassetteCodec, CassetteError, short
from ssetape.cassettes.sessions import HTTP_VERSION, SESSIONS_VERSION, SessionLines
from ssetape.framing.framings import FRAMINGS, Framing, frame_fields, framing_of_headers
from ssetape.storage.cassette_rows import KINDS, columns

__all__ = [
    "FORMAT_VERSION",
    "HEADER_KEY",
    "MAX_BYTES",
    "MAX_LINE_BYTES",
    "MAX_REDACT_FIELDS",
    "ImportReport",
    "header_line",
    "read_records",
]

FORMAT_VERSION = SESSIONS_VERSION  # the newest this ssetape reads
MAX_LINE_BYTES = 64 * 1024 * 1024
MAX_BYTES = 4 * 1024 * 1024 * 1024
# A field is a few bytes of line and a few Python objects (and a needle) in every redactor.
MAX_REDACT_FIELDS = 10_000
HEADER_KEY = "ssetape_cassette"
_SLACK_US = 1_000_000  # an event stamped a little after the end was measured (rounding, clocks)
# How `ssetape export` starts an exchange line: its kind, then the id it has in the store.
_EXCHANGE_KIND = b'{"kind":"exchange",'
_STORE_ID = re.compile(rb'\{"kind":"exchange","id":\d{1,20},')


@dataclass
class ImportReport:
    exchanges: int = 0
    events: int = 0
    chunks: int = 0
    skipped: int = 0  # uid already in the store
    ignored: dict[str, int] = field(default_factory=dict)  # unknown key -> first line
    redact_fields: list[str] = field(default_factory=list)
    lines: dict[int, int] = field(default_factory=dict)  # new exchange id -> cassette line


def header_line(redact_fields: list[str], *, sessions: bool = False) -> bytes:
    """Line 1; ``sessions``: the cassette holds a WebSocket session (version 3), else it is
    version 2 as it always was, which every ssetape since reads."""
    version = SESSIONS_VERSION if sessions else HTTP_VERSION
    return orjson.dumps({HEADER_KEY: version, "redact_fields": redact_fields}) + b"\n"


def read_records(
    name: str,
    lines: Iterable[tuple[int, bytes]],
    report: ImportReport,
    *,
    now: dt.datetime | None = None,
) -> Generator[tuple[int, str, dict[str, Any]]]:
    """Validated (line number, kind, column values) of every line after the header of the
    cassette ``name``, from its (line number, bytes) ``lines``.

    Unknown keys are dropped (and noted in ``report``); everything else that is wrong
    raises CassetteError naming the line.
    """
    codecs = {kind: CassetteCodec(kind) for kind in KINDS}
    seen_uids: dict[str, int] = {}
    last_seq: dict[str, int | None] = {"event": None, "chunk": None}
    have_exchange = False
    duration: int | None = None
    rows = iter(lines)
    header = next(rows, None)
    if header is None:
        raise CassetteError(
            f"{name}: empty file, not an ssetape cassette "
            f'(line 1 must be a header like {{"{HEADER_KEY}": {FORMAT_VERSION}}})'
        )
    report.redact_fields = _header(name, *header)
    started = (now or dt.datetime.now(dt.UTC)).isoformat()
    framing = Framing.CHUNKS
    sessions = SessionLines()
    alike: dict[bytes, int] = {}
    for number, raw in rows:
        where = f"{name}:{number}"
        obj = _parse(where, raw)
        if obj is None:
            continue
        kind = obj.pop("kind", None)
        if kind not in codecs:
            what = "unknown kind " + short(kind) if kind is not None else 'no "kind"'
            raise CassetteError(f'{where}: {what} (expected "exchange", "event" or "chunk")')
        if kind == "exchange":
            # Content-addressed: the same exchange imported twice is the same row (and two
            # identical lines in one cassette are two exchanges).
            # Counted by digest: a line can be megabytes, and all would stay until the end.
            # The store id an export wrote names the row it came from, not the exchange: it is
            # left out of both (an exchange exported from two stores is the same row).
            obj.pop("id", None)
            content = _without_id(raw)
            line = _sha256(b"", *content)
            same = alike[line] = alike.get(line, -1) + 1
            # Not b"%d:%s": a copy of the line.
            obj.setdefault("uid", _sha256(b"%d:" % same, *content).hex()[:32])
            obj.setdefault("started_at", started)
            del content
        # The line and its parsed strings go as soon as the values are decoded: a 64 MiB
        # body would otherwise stand three times in memory while it is stored.
        del raw
        values = codecs[kind].decode(obj, name, number, report.ignored)
        parsed_data = "data" in obj
        del obj
        if kind == "exchange":
            sessions.exchange(where, values)
            framing = framing_of_headers(values.get("response_headers"))
            uid = values["uid"]
            if uid in seen_uids:
                raise CassetteError(
                    f"{where}: duplicate exchange uid {uid} (also on line {seen_uids[uid]})"
                )
            seen_uids[uid] = number
            have_exchange = True
            duration = values.get("duration_us")
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
            if duration is not None and values["offset_us"] > duration + _SLACK_US:
                raise CassetteError(
                    f"{where}: {kind} offset_us {values['offset_us']} is after the exchange "
                    f"ended ({duration})"
                )
            # A WebSocket message's fields are derived by `sessions`; an HTTP event's type,
            # data and id are parsed from its bytes as the recorder parsed them.
            if kind == "chunk":
                sessions.chunk(where)
            elif not sessions.event(where, values) and framing in FRAMINGS and not parsed_data:
                values.update(frame_fields(values["raw"], framing))
        yield number, kind, values


def _without_id(raw: bytes) -> tuple[bytes | memoryview, ...]:
    """An exchange line as it is without the store id `ssetape export` writes after its kind
    (the line as an export without it writes it), in pieces: no copy of a long line."""
    m = _STORE_ID.match(raw)
    return (raw,) if m is None else (_EXCHANGE_KIND, memoryview(raw)[m.end() :])


def _sha256(*pieces: bytes | memoryview) -> bytes:
    h = hashlib.sha256()
    for piece in pieces:
        h.update(piece)
    return h.digest()


def _header(name: str, number: int, raw: bytes) -> list[str]:
    where = f"{name}:{number}"
    what = f'not an ssetape cassette (line 1 must be a header like {{"{HEADER_KEY}": 1}})'
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise CassetteError(f"{where}: {what}") from None
    if not isinstance(obj, dict) or HEADER_KEY not in obj:
        raise CassetteError(f"{where}: {what}")
    _unique_keys(where, raw, obj)
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
    if len(fields) > MAX_REDACT_FIELDS:
        raise CassetteError(
            f'{where}: "redact_fields" has {len(fields)} fields, more than {MAX_REDACT_FIELDS}'
        )
    return fields


def _parse(where: str, raw: bytes) -> dict[str, Any] | None:
    if not raw or raw.isspace():  # not strip(): it would copy a 64 MiB line to find out
        return None  # blank lines (an editor's trailing newline) carry nothing
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise CassetteError(f"{where}: invalid JSON ({str(e).splitlines()[0]})") from None
    if not isinstance(obj, dict):
        raise CassetteError(f"{where}: expected a JSON object, got {short(obj)}")
    _unique_keys(where, raw, obj)
    return obj


def _unique_keys(where: str, raw: bytes, obj: dict[str, Any]) -> None:
    """CassetteError if an object of the line names a key twice: orjson keeps the last one,
    so a reviewer reading the first would approve what is not imported.

    Found cheaply: every key is counted where its quoted name stands in the line. A key named
    twice stands there twice (or hides behind an escape), so lines whose counts match what
    was parsed, with no such escape, are settled without a second parse; the few others
    (a key name that is also a value, an escaped character) are parsed again, pair by pair.
    """
    if b"\\u" not in raw and b"\\/" not in raw:
        keys = list(obj)
        stack = [v for v in obj.values() if isinstance(v, dict | list)]
        while stack:  # most lines have no nested object but a {"b64": ...}
            node = stack.pop()
            if isinstance(node, dict):
                keys += node
            stack += [v for v in (node.values() if isinstance(node, dict) else node)
                      if isinstance(v, dict | list)]  # fmt: skip
        # Without those escapes each key stands in the line at least once as _QUOTED has it.
        if len(keys) == len(set(keys)):
            if sum(map(raw.count, map(_QUOTED.__getitem__, keys))) == len(keys):
                return
        elif all(raw.count(_QUOTED[k]) == n for k, n in Counter(keys).items()):
            return
    try:
        json.loads(raw, object_pairs_hook=_no_repeats)
    except _Repeated as e:
        raise CassetteError(
            f"{where}: key {short(e.args[0])} appears twice in one object"
        ) from None
    except (ValueError, RecursionError):  # what orjson took and json does not: too deep
        raise CassetteError(f"{where}: nested too deep to be checked") from None


class _Quoted(dict[str, bytes]):
    """Keys as they stand in a line; the columns' names made once (a line has a few)."""

    def __missing__(self, key: str) -> bytes:
        return orjson.dumps(key)  # not kept: a cassette may name a million keys


_QUOTED = _Quoted(
    (k, orjson.dumps(k).decode().encode())
    for k in (
        "kind",
        "b64",
        HEADER_KEY,
        "redact_fields",
        *(c.name for kind in KINDS for c in columns(kind)),
    )
)


class _Repeated(ValueError):
    pass


def _no_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Repeated(key)
            seen.add(key)
    return out
