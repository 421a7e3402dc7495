"""How the rows of one table travel in a cassette line, column by column.

Columns are taken from the SQLAlchemy table, not listed here, so columns added to the store
travel without changes to this code: each gets a kind from its Python type (bytes, datetime,
bool, int, float, str, or json for anything else) and is required when it is NOT NULL without
a default. Bytes are text when valid UTF-8, else ``{"b64": "..."}``.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
from typing import Any, NamedTuple, cast

import orjson

from ssetape.analysis.knowledge import KNOWLEDGE_COLUMNS
from ssetape.cassettes.constraints import check
from ssetape.storage.cassette_rows import ColumnSpec, columns
from ssetape.vocabulary import Opcode

# Ids are the store's own: a row's are never read from a cassette (the store numbers its own),
# and only `ssetape export` writes an exchange's id, as a reference to it (``encode``).
_SKIP = {"exchange": {"id"}, "event": {"exchange_id"}, "chunk": {"exchange_id"}}
# Read when present (format 1 wrote them) but not written: what changes on every recording of
# the same interaction (uid, started_at, recorder), and what is derived from the rest (the
# analysis, the event count, the fields of an event, which its raw bytes hold). A re-recorded
# cassette then differs where the timing did, and each event's bytes are in it once.
NOT_WRITTEN = {
    "exchange": frozenset({"uid", "started_at", "recorder", "event_count"}) | KNOWLEDGE_COLUMNS,
    "event": frozenset({"event", "data", "sse_id"}),
    "chunk": frozenset(),
}
# A WebSocket message's line, in this order (then its payload): see cassettes.sessions.
_MESSAGE_ORDER = ("seq", "offset_us", "direction", "opcode")
_KINDS: list[tuple[type, str]] = [
    (bytes, "bytes"), (dt.datetime, "datetime"), (bool, "bool"), (int, "int"), (float, "float"),
    (str, "str"),
]  # fmt: skip
_KIND_NAMES = {"bool": "true or false", "int": "an integer", "float": "a number", "str": "a string"}
_CHECKS = {
    "bool": lambda v: isinstance(v, bool),
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "float": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "str": lambda v: isinstance(v, str),
}


class CassetteError(ValueError):
    """Malformed, oversized or unsupported cassette input; the message is one line."""


class _Column(NamedTuple):
    name: str
    kind: str
    nullable: bool
    required: bool


def _column(spec: ColumnSpec) -> _Column:
    kind = next((k for t, k in _KINDS if issubclass(spec.python_type, t)), "json")
    return _Column(spec.name, kind, spec.nullable, spec.required)


def encode_bytes(value: bytes) -> str | dict[str, str]:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return {"b64": base64.b64encode(value).decode("ascii")}


def short(value: Any) -> str:
    """A value as it may appear in an error message: JSON, at most 40 characters."""
    try:
        text = orjson.dumps(value).decode()
    except orjson.JSONEncodeError:
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _message(obj: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    """A WebSocket message's line: who sent it and how before its payload (a reviewer reads
    them first), which is text in a text frame and base64 in a binary one, whatever it holds."""
    first = {k: obj.pop(k) for k in ("kind", *_MESSAGE_ORDER) if k in obj}
    if row.get("opcode") == Opcode.BINARY:
        obj["raw"] = {"b64": base64.b64encode(row["raw"]).decode("ascii")}
    return {**first, **obj}


class CassetteCodec:
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.columns = {c.name: _column(c) for c in columns(kind) if c.name not in _SKIP[kind]}
        self.written = {n: c for n, c in self.columns.items() if n not in NOT_WRITTEN[kind]}

    def encode(self, row: dict[str, Any], uid: str, *, store_id: bool = False) -> bytes:
        """One line (with its newline) for a row of this table; ``store_id``: an exchange's
        with its id in the store, after its kind (``"id": 12``: `ssetape show 12` there)."""
        obj: dict[str, Any] = {"kind": self.kind}
        if store_id and self.kind == "exchange" and isinstance(row.get("id"), int):
            obj["id"] = row["id"]
        for name, col in self.written.items():
            value = row.get(name)
            if value is None:
                # Empty optional event fields stay off the line: a diff shows what an event
                # carries. Exchanges list every column, so readers see the whole schema;
                # but an HTTP exchange's transport (NULL), so its cassette stays as it was.
                if self.kind == "exchange" and name != "transport":
                    obj[name] = None
                continue
            if col.kind == "bytes":
                value = encode_bytes(value)
            elif col.kind == "datetime":
                value = cast(dt.datetime, value).isoformat()
            obj[name] = value
        if self.kind == "event" and row.get("direction") is not None:
            obj = _message(obj, row)
        try:
            return orjson.dumps(obj) + b"\n"
        except orjson.JSONEncodeError as e:
            raise CassetteError(f"cannot write exchange {uid}: {e}") from None

    def decode(
        self, obj: dict[str, Any], path: str, number: int, ignored: dict[str, int]
    ) -> dict[str, Any]:
        """Column values from line ``number`` of ``path`` (parsed, ``kind`` taken out).

        Keys this ssetape does not know are left out and noted in ``ignored`` (key -> line).
        """
        where = f"{path}:{number}"
        values: dict[str, Any] = {}
        for key, value in obj.items():
            col = self.columns.get(key)
            if col is None:
                ignored.setdefault(f"{self.kind}.{key}", number)
                continue
            values[key] = self._value(col, value, where)
            value = values[key]
            wrong = check(self.kind, key, value) if value is not None else None
            if wrong is not None:
                # Not the value itself when it is a structure: it may be nested a mile deep.
                what = f", not {short(value)}" if not isinstance(value, dict | list) else ""
                raise CassetteError(f"{where}: {key!r} {wrong}{what}")
        missing = [n for n, c in self.columns.items() if c.required and n not in values]
        if missing:
            raise CassetteError(
                f"{where}: {self.kind} line is missing {', '.join(map(repr, missing))}"
            )
        return values

    @staticmethod
    def _value(col: _Column, value: Any, where: str) -> Any:
        name = col.name
        if value is None:
            if not col.nullable:
                raise CassetteError(f"{where}: {name!r} must not be null")
            return None
        if col.kind == "bytes":
            if isinstance(value, str):
                return value.encode("utf-8")
            if isinstance(value, dict) and set(value) == {"b64"} and isinstance(value["b64"], str):
                try:
                    return base64.b64decode(value["b64"], validate=True)
                except (binascii.Error, ValueError):
                    raise CassetteError(f"{where}: {name!r}: invalid base64") from None
            raise CassetteError(f'{where}: {name!r} must be a string or {{"b64": "..."}}')
        if col.kind == "datetime":
            try:
                return dt.datetime.fromisoformat(value)
            except (TypeError, ValueError):
                raise CassetteError(
                    f"{where}: {name!r}: not an ISO 8601 datetime: {short(value)}"
                ) from None
        check = _CHECKS.get(col.kind)
        if check is not None and not check(value):
            raise CassetteError(
                f"{where}: {name!r} must be {_KIND_NAMES[col.kind]}, not {short(value)}"
            )
        return value
