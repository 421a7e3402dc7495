"""A response's body as the recorder stores it: whole up to ``ssetape_max_response_body``,
past it (or of unknown length and past it) streamed through a tap and stored as its size,
SHA-256 and first bytes.

mitmproxy buffers a response body whole before its ``response`` hook, and the recorder then
handed it whole to the recording process, which stored it whole: a 300 MiB JSON answer held
1.2 GiB in the proxy and 1.5 GiB in the recording process. A body of unknown length, or one
announced over the bound, streams through a ``BodyTap`` instead: the client gets each chunk
at once, the proxy keeps at most the bound of it, and the exchange says what was not kept.
Replay refuses such an exchange (``replay.player``) rather than answer a body cut short.
"""

from __future__ import annotations

from typing import Any

from mitmproxy import http
from mitmproxy.addonmanager import Loader

from ssetape.analysis.apis import streams_array
from ssetape.framing.framings import FRAMINGS
from ssetape.recording.body_tap import BodyTap
from ssetape.vocabulary import MAX_BODY

__all__ = [
    "BODY_HEAD",
    "MAX_RESPONSE_BODY",
    "STREAM_TYPES",
    "add_response_body_option",
    "is_streamed",
    "response_body_fields",
    "tap_response",
]

MAX_RESPONSE_BODY = MAX_BODY  # the option's default: 16 MiB
BODY_HEAD = 64 << 10  # bytes of a body over the bound kept, for `show` (its BODY_MAX)
# What a framing cuts into events is a stream (SSE, NDJSON, AWS event streams).
STREAM_TYPES = tuple(t for spec in FRAMINGS.values() for t in spec.content_types)


def add_response_body_option(loader: Loader) -> None:
    loader.add_option(
        "ssetape_max_response_body",
        int,
        MAX_RESPONSE_BODY,
        "Bytes of a response that is not a stream (a JSON answer) that are stored; a larger "
        "one streams to the client untouched and is stored as its size, SHA-256 and first "
        f"{BODY_HEAD >> 10} KiB (the exchange says so; replay refuses it).",
    )


def is_streamed(response: http.Response, path: str = "") -> bool:
    """Bodies we pass through chunk by chunk instead of letting mitmproxy buffer them."""
    ctype = response.headers.get("content-type", "").lower()
    if ctype.startswith(STREAM_TYPES):
        return True
    if "content-length" in response.headers:
        return False
    if ctype.startswith("application/json"):
        # A JSON answer is one body, except on a path whose stream is a JSON array sent in
        # pieces (Gemini without alt=sse): that one is relayed and timed chunk by chunk.
        return streams_array(path)
    return response.status_code not in (204, 304)


def _large(resp: http.Response, bound: int) -> bool:
    """Not known to be within ``bound``: announced over it, or of unknown length."""
    length = resp.headers.get("content-length", "").strip()
    return "transfer-encoding" in resp.headers or not length.isdigit() or int(length) > bound


def tap_response(resp: http.Response, bound: int, *, recorded: bool) -> None:
    """A body that is not a stream, unless known to be within ``bound``, streams through: a
    tap that keeps it up to ``bound`` if ``recorded``, else as it is (nothing is kept)."""
    if resp.stream or not _large(resp, bound):  # another addon's stream: theirs to handle
        return
    resp.stream = BodyTap(bound, BODY_HEAD) if recorded else True


def response_body_fields(resp: http.Response) -> tuple[dict[str, Any], str | None]:
    """The exchange's fields for the body of ``resp`` (ended), and what the exchange must say
    it misses (None: the body is stored whole)."""
    tap = resp.stream
    if not isinstance(tap, BodyTap) or resp.raw_content is not None:
        return {"response_body": resp.raw_content}, None  # buffered by mitmproxy, as before
    if tap.broken:
        return {}, "the response body was not recorded (a recording bug); the client got it"
    if not tap.over:
        return {"response_body": tap.body()}, None
    head = tap.head()
    fields = {
        "response_body": head,
        "response_body_bytes": tap.size,
        "response_body_sha256": tap.sha256(),
    }
    why = (
        f"response body of {tap.size} bytes over ssetape_max_response_body ({tap.bound}) not "
        f"stored whole: only its size, SHA-256 and first {len(head)} bytes; replay refuses it"
    )
    return fields, why
