"""Which simulated API answers a request: one entry per endpoint, its builders in its module.

Adding an endpoint to the simulator is one builder (a function of the parsed
:class:`~ssetape.simulator.scenario.Scenario` and the speed) and one line in :data:`ROUTES`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ssetape.simulator import anthropic_streams, gemini_streams, openai_streams
from ssetape.simulator.scenario import Api, Plan, Scenario, parse_request

__all__ = ["ROUTES", "plan", "route"]

Builder = Callable[[Scenario, float], Plan]
ErrorBuilder = Callable[[Scenario | None, int, str, float], Plan]

# Path suffix (gateway prefixes such as /api/v1 work), API, its stream or JSON builder and the
# shape of its errors. Longer suffixes first.
ROUTES: tuple[tuple[str, Api, Builder, ErrorBuilder], ...] = (
    ("/chat/completions", "chat", openai_streams.chat, openai_streams.error),
    ("/responses", "responses", openai_streams.responses, openai_streams.error),
    ("/messages", "messages", anthropic_streams.messages, anthropic_streams.error),
    ("/images/generations", "images", openai_streams.images, openai_streams.error),
    ("/images", "images", openai_streams.images, openai_streams.error),
    # Gemini names the model in the path: .../models/{model}:streamGenerateContent.
    (":streamGenerateContent", "gemini", gemini_streams.gemini, gemini_streams.error),
    (":generateContent", "gemini", gemini_streams.gemini, gemini_streams.error),
)


def _entry(path: str) -> tuple[str, Api, Builder, ErrorBuilder] | None:
    path = path.split("?", 1)[0].rstrip("/")
    return next((r for r in ROUTES if path.endswith(r[0])), None)


def route(path: str) -> Api | None:
    """Which API a path belongs to, by suffix (the query string is ignored)."""
    found = _entry(path)
    return None if found is None else found[1]


def plan(
    method: str, path: str, headers: Mapping[str, str], body: bytes, *, speed: float = 1.0
) -> Plan:
    """What to send for one request: status, headers and the timed chunks (deterministic).

    ``headers`` have lower-case names; ``speed`` divides every delay."""
    if not speed > 0:
        raise ValueError(f"speed must be positive, got {speed!r}")
    found = _entry(path)
    if found is None:
        message = f"Unknown request URL: {method} {path}. Please check the URL."
        return openai_streams.error(None, 404, message, speed, code="unknown_url")
    _, api, build, error = found
    if method.upper() != "POST":
        return error(None, 405, f"Method {method} is not allowed on {path}.", speed)
    try:
        sc = parse_request(api, headers, body, path)
    except ValueError as exc:  # orjson.JSONDecodeError is a ValueError
        return error(None, 400, f"Could not parse the JSON body: {exc}", speed)
    if sc.status_error is not None:
        return error(sc, sc.status_error, f"Simulated HTTP {sc.status_error} ({sc.model}).", speed)
    return build(sc, speed)
