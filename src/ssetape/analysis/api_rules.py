"""What the analyzer needs to know of one streaming API: the interface every rules module fills.

Each module of :mod:`ssetape.analysis.rules` defines one :class:`ApiRules` named ``RULES``;
:mod:`ssetape.analysis.apis` lists them. Payloads come from the network, so the functions
type-check every field they read and never raise on bad input.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ssetape.analysis.tally import Tally

__all__ = ["ApiRules", "Payload"]

Payload = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ApiRules:
    name: str
    # Request path suffixes, matched by suffix so that gateway prefixes (/api/v1) work.
    paths: tuple[str, ...]
    # One data event, parsed: (tally, seq, type, payload) -> whether it carried content (what
    # TTFT and the inter-token gaps are measured on). ``type`` is the SSE event name, else the
    # payload's "type"; None for APIs whose events carry no type (``typed_events`` off).
    event: Callable[[Tally, int, str | None, Payload], bool]
    # A whole non-streamed answer (or an error object sent with HTTP 200).
    body: Callable[[Tally, Payload], None]
    # Whether one event (type, payload) or one body belongs to this API, when the path did not
    # tell (an unknown gateway route).
    claims_event: Callable[[str | None, object], bool]
    claims_body: Callable[[Payload], bool]
    # The finding's detail when a stream of this API ends without its terminal.
    no_terminal: str
    # ``data: [DONE]``; None: [DONE] is not part of this API (it is then invalid JSON).
    done: Callable[[Tally], None] | None = None
    # Request options that change what the stream owes (e.g. usage asked for).
    request: Callable[[Tally, Payload], None] | None = None
    typed_events: bool = True
    # For the timeline: event types that end the stream, that carry an error, that carry
    # content (besides every ``*.delta``); and, for untyped events, a payload's kind.
    terminal_events: frozenset[str] = frozenset()
    error_events: frozenset[str] = frozenset()
    content_events: frozenset[str] = frozenset()
    payload_kind: Callable[[Payload], str] | None = None
    # Paths whose streams are one JSON array sent in pieces over ``application/json``
    # (Gemini without ``alt=sse``): relayed chunk by chunk, each element read as an event.
    array_paths: tuple[str, ...] = ()
    # A whole JSON array answer (such a stream stored as a body), element by element.
    body_array: Callable[[Tally, list[object]], None] | None = None
    # The label of an error object (an HTTP error body's "error"): code, else type, else
    # message, unless the API names its errors otherwise (Gemini: its status).
    error_reason: Callable[[object], str | None] = Tally.error_reason
    # Whether the reported input count leaves cache reads and writes out (Anthropic's
    # input_tokens), where the others count them in: pricing adds them back.
    input_excludes_cache: bool = False
    # The model a request path names, for APIs whose bodies do not (Bedrock's /model/{id}/).
    model_of_path: Callable[[str], str | None] | None = None
    # The provider whose API this is (genai-prices' id), for pricing a call that reached it
    # through a host genai-prices does not know: Bedrock's model ids are priced as AWS's.
    vendor: str | None = None
