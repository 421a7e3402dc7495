"""A request's body as the recorder stores it: redacted, or past ``MAX_BODY`` its stand-in,
with the request's fingerprint; and the tap a large or unsized body streams through.

mitmproxy buffers a request body whole before its ``request`` hook (a 300 MiB upload held
1.14 GiB). A body over the bound, or of unknown length, streams through a ``BodyTap``
instead: the upstream gets each chunk at once and the proxy holds at most ``MAX_BODY``.
"""

from __future__ import annotations

from typing import Any

from mitmproxy import http

from ssetape.matching import canonical_request, fingerprint, placeholder
from ssetape.recording.body_tap import BodyTap
from ssetape.redactor import Redactor
from ssetape.vocabulary import MAX_BODY

__all__ = ["body_fields", "partial_body_fields", "tap_if_large", "tapped"]


def tap_if_large(req: http.Request) -> None:
    """Stream ``req``'s body through a tap unless it is known to be within the bound."""
    if callable(req.stream):  # another addon's stream: theirs to handle
        return
    length = req.headers.get("content-length", "").strip()
    if "transfer-encoding" in req.headers or not length.isdigit() or int(length) > MAX_BODY:
        # No body at all (a GET) is not streamed: mitmproxy ends it with the head.
        req.stream = BodyTap()


def tapped(req: http.Request) -> BodyTap | None:
    """The tap ``req``'s body streamed through (mitmproxy then keeps no content), if any."""
    tap = req.stream
    return tap if isinstance(tap, BodyTap) and req.raw_content is None else None


def body_fields(redactor: Redactor, req: http.Request, tap: BodyTap | None) -> dict[str, Any]:
    """The whole request's path, query, body and fingerprint (may take a while on a large
    body: off the event loop)."""
    raw = req.raw_content if tap is None else tap.body()
    if tap is not None and tap.over:
        body: bytes | None = raw  # already its stand-in: the body passed, hashed
    elif raw is not None and len(raw) > MAX_BODY:
        body = placeholder(raw)  # its size and hash: never parsed nor kept
    else:
        body = redactor.body(raw, req.headers.get("content-encoding", ""))
    return _fields(redactor, req, body)


def partial_body_fields(redactor: Redactor, req: http.Request, tap: BodyTap) -> dict[str, Any]:
    """The same for a body the upstream answered before it ended: its stand-in (of what had
    passed), never parsed."""
    return _fields(redactor, req, tap.stand_in())


def _fields(redactor: Redactor, req: http.Request, body: bytes | None) -> dict[str, Any]:
    path, _, raw_query = req.path.partition("?")
    query = redactor.query(raw_query)
    canon = canonical_request(req.method, req.host, path, query, body)
    return {"path": path, "query": query, "request_body": body, "fingerprint": fingerprint(canon)}
