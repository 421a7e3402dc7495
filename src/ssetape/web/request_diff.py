"""What differs between two recorded requests: the method and URL, the headers, and the fields
of their JSON bodies (one row per leaf: ``messages[0].content``, ``model``, ...).

Bounded: a body past :data:`BODY_PARSED` bytes is compared whole, not field by field, and a
diff lists at most :data:`DIFF_ROWS` rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

from ssetape.storage.models import Exchange
from ssetape.views.documents import url_of

__all__ = ["BODY_PARSED", "DIFF_ROWS", "Difference", "differences"]

BODY_PARSED = 4 * 1024 * 1024
DIFF_ROWS = 500
# A value shown in a diff cell: the whole is compared, this much is shown.
VALUE_SHOWN = 500
_MISSING = "(absent)"

# (where: "request", "header" or "body"; what: a name or a JSON path; a's value; b's value)
Difference = tuple[str, str, str, str]


def _headers(x: Exchange) -> dict[str, str]:
    out: dict[str, list[str]] = {}
    for name, value in x.request_headers or []:
        out.setdefault(name.lower(), []).append(value)
    return {k: ", ".join(v) for k, v in out.items()}


def _leaves(obj: Any) -> Iterator[tuple[str, str]]:
    """(JSON path, the value as compact JSON) of every leaf, in document order; an empty list
    or object is one. Not recursive, as :func:`ssetape.matching.leaves`: a body may nest as
    deep as the JSON parser allows, past Python's recursion limit."""
    stack: list[tuple[str, Any]] = [("", obj)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, dict) and value:
            kids = [(f"{path}.{k}" if path else str(k), v) for k, v in value.items()]
        elif isinstance(value, list) and value:
            kids = [(f"{path}[{i}]", v) for i, v in enumerate(value)]
        else:
            yield path or "(body)", orjson.dumps(value).decode()
            continue
        stack += reversed(kids)


def _json(body: bytes | None) -> Any:
    if not body or len(body) > BODY_PARSED:
        return None
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return None


def _cut(text: str) -> str:
    return text if len(text) <= VALUE_SHOWN else text[:VALUE_SHOWN] + f"… ({len(text):,} chars)"


def _pairs(a: dict[str, str], b: dict[str, str]) -> Iterator[tuple[str, str, str]]:
    for key in sorted(a.keys() | b.keys()):
        va, vb = a.get(key, _MISSING), b.get(key, _MISSING)
        if va != vb:
            yield key, va, vb


def differences(a: Exchange, b: Exchange) -> tuple[list[Difference], bool]:
    """What differs between a's request and b's, and whether the list was cut."""
    out: list[Difference] = []
    for what, va, vb in (("method", a.method, b.method), ("URL", url_of(a), url_of(b))):
        if va != vb:
            out.append(("request", what, va, vb))
    out += [("header", k, va, vb) for k, va, vb in _pairs(_headers(a), _headers(b))]
    ja, jb = _json(a.request_body), _json(b.request_body)
    if ja is not None and jb is not None:
        out += [("body", k, va, vb) for k, va, vb in _pairs(dict(_leaves(ja)), dict(_leaves(jb)))]
    elif (a.request_body or b"") != (b.request_body or b""):
        na, nb = (f"{len(x.request_body or b''):,} bytes (not compared by field)" for x in (a, b))
        out.append(("body", "(whole body)", na, nb))
    cut = len(out) > DIFF_ROWS
    return [(w, k, _cut(va), _cut(vb)) for w, k, va, vb in out[:DIFF_ROWS]], cut
