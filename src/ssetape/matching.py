"""Request fingerprints: what makes two requests "the same" for replay.

Pure functions. The canonical form is method, host, path, sorted query and the JSON body with
key order and whitespace normalised; ``ignore`` drops volatile JSON fields (dotted paths).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qsl

import orjson


def canonical_body(body: bytes | None, ignore: Iterable[str] = ()) -> Any:
    """The body as a comparable value: parsed JSON (minus ignored fields) or the raw bytes."""
    if not body:
        return None
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body.decode("utf-8", "surrogateescape")
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
