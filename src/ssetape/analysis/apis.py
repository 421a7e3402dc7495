"""The streaming APIs ssetape knows: one entry per API, its rules in its own module.

Adding an API is one module in :mod:`ssetape.analysis.rules` defining ``RULES`` and one line
here. An exchange's API is found from its request path (by suffix, so gateway prefixes work),
else from its first events or its body.
"""

from __future__ import annotations

import re

from ssetape.analysis.api_rules import ApiRules, Payload
from ssetape.analysis.rules import chat_completions, gemini, images, messages, responses

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
    )
}
# A Responses stream resumed by id: GET /v1/responses/{id}?stream=true&starting_after=N.
_RESUMED = re.compile(r"/responses/[^/]+$")
# Typed APIs first: their event names are the surest sign, a "choices" key the weakest.
_BY_EVENT = sorted(APIS.values(), key=lambda r: not r.typed_events)


def api_names() -> list[str]:
    """Every value an exchange's ``api`` can take."""
    return [*APIS, UNKNOWN]


def detect_api(path: str) -> str:
    """The API of a request path, by suffix so that gateway prefixes such as /api/v1 work."""
    path = _bare(path)
    for rules in APIS.values():
        if path.endswith(rules.paths):
            return rules.name
    return responses.RULES.name if _RESUMED.search(path) else UNKNOWN


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
