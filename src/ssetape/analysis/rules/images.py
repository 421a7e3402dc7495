"""Rules of OpenAI's streamed image generation (``/images/generations``, ``/images/edits``).

Partial images, then ``image_generation.completed`` (or ``error``), then ``data: [DONE]``.
"""

from __future__ import annotations

from typing import Any

from ssetape.analysis.api_rules import ApiRules
from ssetape.analysis.rules.payload import openai_body_head
from ssetape.analysis.tally import Tally
from ssetape.vocabulary import Outcome

__all__ = ["RULES"]

PARTIAL, COMPLETED = "image_generation.partial_image", "image_generation.completed"
_EVENTS = frozenset({PARTIAL, COMPLETED, "error"})


def event(tally: Tally, seq: int, kind: str | None, ev: dict[str, Any]) -> bool:
    if kind == PARTIAL:
        return True  # what the caller waits for, as TTFT counts it
    if kind == COMPLETED:
        usage = ev.get("usage")
        if isinstance(usage, dict):
            tally.usage(
                usage.get("input_tokens"), usage.get("output_tokens"), usage.get("total_tokens")
            )
        # data: [DONE] still has to follow.
        tally.end(Outcome.COMPLETED, "completed", finished=False, done_ok=True)
    elif kind == "error":
        tally.end(Outcome.ERROR, tally.error_reason(ev.get("error")) or "error", done_ok=True)
    elif kind not in _EVENTS:
        tally.unknown(seq, str(kind))
    return False


def done(tally: Tally) -> None:
    """``data: [DONE]`` before any completed or error event: over, but without an outcome."""
    tally.closed = True


def body(tally: Tally, obj: dict[str, Any]) -> None:
    if not openai_body_head(tally, obj):
        tally.end(Outcome.COMPLETED, "completed")


RULES = ApiRules(
    name="images",
    paths=("/images/generations", "/images/edits", "/images"),
    event=event,
    body=body,
    claims_event=lambda kind, _obj: bool(kind) and str(kind).startswith("image_generation."),
    claims_body=lambda obj: isinstance(obj.get("data"), list),
    no_terminal="The stream ended without image_generation.completed and data: [DONE].",
    done=done,
    terminal_events=frozenset({COMPLETED}),
    error_events=frozenset({"error"}),
    content_events=frozenset({PARTIAL}),
)
