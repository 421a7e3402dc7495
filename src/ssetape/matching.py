"""Request fingerprints: what makes two requests "the same" for replay.

Pure functions. The canonical form is method, host, path, sorted query and the JSON body with
key order and whitespace normalised; ``ignore`` drops volatile JSON fields (dotted paths).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

import orjson

from ssetape.vocabulary import MAX_BODY


def body_stand_in(size: int, sha256: str) -> dict[str, Any]:
    """What stands for a body over MAX_BODY, stored and matched alike."""
    return {"ssetape_body_not_stored": {"bytes": size, "sha256": sha256}}


def placeholder(body: bytes) -> bytes:
    """A body over MAX_BODY as it is stored: its stand-in, as JSON."""
    return orjson.dumps(body_stand_in(len(body), hashlib.sha256(body).hexdigest()))


def placeholder_of(size: int, sha256: str) -> bytes:
    """The same, for a body hashed as it was read (never held whole)."""
    return orjson.dumps(body_stand_in(size, sha256))


def canonical_body(body: bytes | None, ignore: Iterable[str] = ()) -> Any:
    """The body as a comparable value: parsed JSON (minus ignored fields) or the raw bytes."""
    if not body:
        return None
    if len(body) > MAX_BODY:  # stored as its stand-in: compared the same way
        return body_stand_in(len(body), hashlib.sha256(body).hexdigest())
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        try:
            return body.decode("utf-8")
        except UnicodeDecodeError:  # uploads, compressed bodies: compare by content hash
            return {"sha256": hashlib.sha256(body).hexdigest(), "bytes": len(body)}
    for path in ignore:
        _drop(doc, path.split("."))
    return doc


def _drop(node: Any, parts: list[str]) -> None:
    if isinstance(node, list):
        for item in node:
            _drop(item, parts)
    elif isinstance(node, dict) and parts:
        if len(parts) == 1:
            node.pop(parts[0], None)
        elif parts[0] in node:
            _drop(node[parts[0]], parts[1:])


def canonical_request(
    method: str,
    host: str,
    path: str,
    query: str,
    body: bytes | None,
    *,
    ignore: Iterable[str] = (),
    match_host: bool = True,
) -> dict[str, Any]:
    return {
        "method": method.upper(),
        "host": host.lower() if match_host else None,
        "path": path,
        "query": sorted(parse_qsl(query, keep_blank_values=True)),
        "body": canonical_body(body, ignore),
    }


def fingerprint(canonical: dict[str, Any]) -> str:
    blob = orjson.dumps(canonical, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    return hashlib.sha256(blob).hexdigest()


def leaves(canonical: Any) -> frozenset[tuple[str, Any]]:
    """Every scalar of a canonical request with its path. Two requests share the leaves they
    agree on, so the size of the symmetric difference is a distance that set operations
    compute at C speed (what :func:`differences` tells field by field, at Python speed)."""
    out: set[tuple[str, Any]] = set()
    stack: list[tuple[str, Any]] = [("", canonical)]
    while stack:  # not recursive: a body may nest as deep as the JSON parser allows
        path, value = stack.pop()
        if isinstance(value, dict) and value:
            stack += ((f"{path}.{k}" if path else str(k), v) for k, v in value.items())
        elif isinstance(value, list) and value:
            stack += ((f"{path}[{i}]", v) for i, v in enumerate(value))
        else:
            out.add((path, _hashable(value)))
    return frozenset(out)


def _hashable(value: Any) -> Any:
    try:
        hash(value)
    except TypeError:  # an empty dict or list, a tuple holding one
        return repr(value)
    return value


def differences(recorded: Any, requested: Any, path: str = "", limit: int = 8) -> list[Difference]:
    """Where two canonical requests differ, as field paths (``body.messages[0].content``)."""
    out: list[Difference] = []
    _diff(recorded, requested, path, out, limit)
    return out


@dataclass(frozen=True, slots=True)
class Difference:
    field: str
    recorded: Any
    requested: Any

    def as_dict(self) -> dict[str, Any]:
        return {"field": self.field, "recorded": _short(self.recorded),
                "requested": _short(self.requested)}  # fmt: skip


_MISSING = "<absent>"


def _short(v: Any) -> Any:
    if isinstance(v, str | int | float | bool) or v is None:
        return v if not isinstance(v, str) or len(v) <= 80 else v[:77] + "..."
    text = orjson.dumps(v).decode()
    return text if len(text) <= 80 else text[:77] + "..."


def _diff(a: Any, b: Any, path: str, out: list[Difference], limit: int) -> None:
    if len(out) >= limit or a == b:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            sub = f"{path}.{k}" if path else str(k)
            _diff(a.get(k, _MISSING), b.get(k, _MISSING), sub, out, limit)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _diff(x, y, f"{path}[{i}]", out, limit)
    else:
        out.append(Difference(path or "request", a, b))


# C0 and C1 controls (newline and tab too), DEL and the bidirectional overrides.
_NOT_ONE_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def one_line(text: str) -> str:
    """``text`` as one printable line, every control character written out (``\\x1b``,
    ``\\n``): what a miss says names recorded hosts and paths (a cassette's, somebody's input),
    and is printed to a terminal, a log and a test report, where an escape sequence would act
    and a newline would forge a line."""
    return _NOT_ONE_LINE.sub(lambda m: repr(m.group())[1:-1], text)
