"""Prompts and outputs in spans: never, unless the user opts in as the GenAI conventions say.

``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`` (or, with the conventions' newer
values, ``span_only`` / ``span_and_event``) puts the stored prompt text and output text on each
span. They are the store's text: the request body was redacted before it was stored, so a
redacted field never reaches a span. The recording process reads the same variable (it is
the one that sends the texts, and only then); a span takes at most :data:`MAX_TEXT`
characters of each.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["CAPTURE_ENV", "MAX_TEXT", "capture_content", "clipped"]

CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_ON = frozenset({"true", "span_only", "span_and_event"})
# A collector refuses a request past a few MB (4 MiB by default over gRPC); a batch holds
# hundreds of spans.
MAX_TEXT = 16 * 1024


def capture_content(environ: Mapping[str, str] | None = None) -> bool:
    value = (os.environ if environ is None else environ).get(CAPTURE_ENV, "")
    return value.strip().lower() in _ON


def clipped(text: str | None) -> str | None:
    return text[:MAX_TEXT] if text else None
