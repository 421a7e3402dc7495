"""OpenAI's Realtime API (GA event names), as the fake upstream speaks it on any path that is
not Gemini's or the Responses API's: ``session.created`` at once, then on each
``response.create`` a ``response.created``, text deltas at a fixed delay and
``response.done`` with usage. The model the client asks for (``?model=``) picks how the
session goes: ``ok``, an ``error`` event, a close with a code and reason, or a TCP cut
without a close frame. A client that sends a binary frame gets binary frames holding JSON
(as Gemini Live answers)."""

from __future__ import annotations

import time
from urllib.parse import parse_qs, urlsplit

import orjson
from websockets.exceptions import ConnectionClosed
from websockets.sync.server import ServerConnection

from tests.ws_upstreams.wire import DELAY, Sender, Session, cut

__all__ = ["CLOSE_CODE", "CLOSE_REASON", "DELTAS", "USAGE", "serve_realtime"]

DELTAS = ("Hel", "lo", " there", "!")
USAGE = {  # openai's RealtimeResponseUsage
    "total_tokens": 31,
    "input_tokens": 12,
    "output_tokens": 19,
    "input_token_details": {"text_tokens": 12, "audio_tokens": 0, "cached_tokens": 4},
    "output_token_details": {"text_tokens": 19, "audio_tokens": 0},
}
CLOSE_CODE, CLOSE_REASON = 1011, "upstream overloaded"


def serve_realtime(ws: ServerConnection, session: Session, send: Sender) -> None:
    assert ws.request is not None
    model = parse_qs(urlsplit(ws.request.path).query).get("model", ["ok"])[0]
    send.json({"type": "session.created", "event_id": "ev_1", "session": {"model": model}})
    n = 0
    try:
        for msg in ws:
            raw = session.got(msg)
            if isinstance(msg, bytes):  # Gemini Live's way: JSON in binary frames
                send.raw(orjson.dumps({"setupComplete": {}}), binary=True)
                send.raw(orjson.dumps({"serverContent": {"turnComplete": True}}), binary=True)
                continue
            if orjson.loads(raw).get("type") != "response.create":
                continue
            n += 1
            if not _respond(send, ws, model, f"resp_{n}"):
                return
    except ConnectionClosed:
        pass


def _respond(send: Sender, ws: ServerConnection, model: str, rid: str) -> bool:
    """One response; False once the session is over (closed or cut)."""
    send.json({"type": "response.created", "response": {"id": rid, "status": "in_progress"}})
    for i, text in enumerate(DELTAS):
        time.sleep(DELAY)
        send.json({
            "type": "response.output_text.delta", "event_id": f"ev_{rid}_{i}",
            "response_id": rid, "item_id": "item_1", "output_index": 0, "content_index": 0,
            "delta": text,
        })  # fmt: skip
        if i == 1 and model == "cut":
            cut(ws)
            return False
        if i == 1 and model == "close":
            send.close(CLOSE_CODE, CLOSE_REASON)
            return False
    if model == "error":
        error = {"type": "server_error", "code": None, "message": "The server had an error"}
        send.json({"type": "error", "event_id": "ev_err", "error": error})
        return True
    done = {"id": rid, "object": "realtime.response", "status": "completed", "usage": USAGE}
    send.json({"type": "response.done", "event_id": f"ev_{rid}", "response": done})
    return True
