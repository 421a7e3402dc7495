"""The fake WebSocket upstream of the recording and replay tests, under the name they import:
it lives in :mod:`tests.ws_upstreams` (one module per API)."""

from __future__ import annotations

from tests.ws_upstreams import (
    CLOSE_CODE,
    CLOSE_REASON,
    DELAY,
    DELTAS,
    GEMINI_CLOSE,
    GEMINI_PARTS,
    GEMINI_USAGE,
    RESPONSES_USAGE,
    SNAPSHOT,
    USAGE,
    Frame,
    RealtimeUpstream,
    Session,
    reply,
)

__all__ = [
    "CLOSE_CODE",
    "CLOSE_REASON",
    "DELAY",
    "DELTAS",
    "GEMINI_CLOSE",
    "GEMINI_PARTS",
    "GEMINI_USAGE",
    "RESPONSES_USAGE",
    "SNAPSHOT",
    "USAGE",
    "Frame",
    "RealtimeUpstream",
    "Session",
    "reply",
]
