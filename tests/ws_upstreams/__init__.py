"""Fake WebSocket upstreams that speak as OpenAI's Realtime API, the Responses API's WebSocket
mode and Gemini's Live API do, for recording and replay tests (only the upstream is fake: the
clients are the official SDKs). Each module holds one API; :class:`RealtimeUpstream` serves
them all, picked by the upgrade path."""

from __future__ import annotations

from tests.ws_upstreams.gemini import GEMINI_CLOSE, GEMINI_PARTS, GEMINI_USAGE
from tests.ws_upstreams.realtime import CLOSE_CODE, CLOSE_REASON, DELTAS, USAGE
from tests.ws_upstreams.responses import RESPONSES_USAGE, SNAPSHOT, reply
from tests.ws_upstreams.server import RealtimeUpstream
from tests.ws_upstreams.wire import DELAY, Frame, Session

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
