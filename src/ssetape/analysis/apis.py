"""The streaming APIs ssetape knows: one entry per API, its rules in its own module.

Adding an API is one module in :mod:`ssetape.analysis.rules` defining ``RULES`` and one line
here. An exchange's API is found from its request path (by suffix, so gateway prefixes work),
else from its first event (a stream no API claims there stays unknown: no rules read it) or
its body.
"""

from __future__ import annotations

import re

from ssetape.analysis.api_rules import ApiRules, Payload
from ssetape.analysis.rules import (
    bedrock_converse,
    bedrock_invoke,
    chat_completions,
    cohere_chat,
    gemini,
    images,
    interactions,
    messages,
    ollama,
    responses,
)

__all__ = [
    "APIS",
    "UNKNOWN",
    "api_names",
    "api_of_body",
    "api_of_event",
    "detect_api",
    "streams_array",
]

UNKNOWN = "unknown"
APIS: dict[str, ApiRules] = {
    rules.name: rules
    for rules in (
        chat_completions.RULES,
        responses.RULES,
        messages.RULES,
        images.RULES,
        gemini.RULES,
        cohere_chat.RULES,
        interactions.RULES,
        bedrock_converse.RULES,
        bedrock_invoke.RULES,
        ollama.RULES,
    )
}
# APIs of WebSocket sessions only: ssetape.analysis.sessions reads them (SessionRules).
SESSION_ONLY = ("openai_realtime", "gemini_live")
# Streams resumed by id: GET /v1/responses/{id}?stream=true&starting_after=N (Responses),
# GET /v1beta/interactions/{id}?stream=true&last_event_id=E (Interactions).
_RESUMED = {
    responses.RULES.name: re.compile(r"/responses/[^/]+$"),
    interactions.RULES.name: re.compile(r"/interactions/[^/]+$"),
}
# Typed APIs first: their event names are the surest sign, a "choices" key the weakest.
_BY_EVENT = sorted(APIS.values(), key=lambda r: not r.typed_events)


def api_names() -> list[str]:
    """Every value an exchange's ``api`` can take."""
    return [*APIS, *SESSION_ONLY, UNKNOWN]


def detect_api(path: str) -> str:
    """The API of a request path, by suffix so that gateway prefixes such as /api/v1 work."""
    path = _bare(path)
    for rules in APIS.values():
        if path.endswith(rules.paths):
            return rules.name
    return next((name for name, resumed in _RESUMED.items() if resumed.search(path)), UNKNOWN)


def streams_array(path: str) -> bool:
    """Whether a path's ``application/json`` answer is a stream (a JSON array in pieces)."""
    path = _bare(path)
    return any(path.endswith(r.array_paths) for r in APIS.values() if r.array_paths)


def _bare(path: str) -> str:
    return path.split("?", 1)[0].split("#", 1)[0].rstrip("/")


def api_of_event(event: str | None, obj: object) -> str:
    """Guess the API from one event when the path did not tell."""
    kind = event if event and event != "message" else None
    if kind is None and isinstance(obj, dict) and isinstance(obj.get("type"), str):
        kind = obj["type"]
    return next((r.name for r in _BY_EVENT if r.claims_event(kind, obj)), UNKNOWN)


def api_of_body(obj: Payload) -> str:
    return next((r.name for r in APIS.values() if r.claims_body(obj)), UNKNOWN)
