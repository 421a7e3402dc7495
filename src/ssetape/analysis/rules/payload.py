"""Readers of untrusted JSON payload fields shared by the rules modules."""

from __future__ import annotations

from typing import Any

from ssetape.analysis.tally import Tally
from ssetape.vocabulary import Outcome

__all__ = ["as_dict", "as_str", "openai_body_head", "openai_usage"]


def as_dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def as_str(value: object) -> str:
    return value if isinstance(value, str) else ""


def openai_body_head(tally: Tally, obj: dict[str, Any]) -> bool:
    """What every OpenAI-style JSON answer starts with: model, usage under either naming,
    and an error object sent with HTTP 200 (True: the answer was that error)."""
    tally.set_model(obj.get("model"))
    openai_usage(tally, obj.get("usage"))
    # A background Responses object has both "error" (null or not) and a "status" string.
    if obj.get("error") is not None and not isinstance(obj.get("status"), str):
        tally.end(Outcome.ERROR, tally.error_reason(obj.get("error")) or "error")
        return True
    return False


def openai_usage(tally: Tally, usage: object) -> None:
    """An OpenAI usage object under either naming (Responses' input/output, Chat's
    prompt/completion), with its cached input and reasoning output when reported."""
    if not isinstance(usage, dict):
        return
    inp = usage.get("input_tokens", usage.get("prompt_tokens"))
    out = usage.get("output_tokens", usage.get("completion_tokens"))
    tally.usage(inp, out, usage.get("total_tokens"))
    cached = as_dict(usage.get("input_tokens_details", usage.get("prompt_tokens_details")))
    reasoning = as_dict(usage.get("output_tokens_details", usage.get("completion_tokens_details")))
    tally.usage_details(
        cache_read=cached.get("cached_tokens"), reasoning=reasoning.get("reasoning_tokens")
    )
