"""Gemini's Live API (``.../BidiGenerateContent``), as google-genai's ``LiveServerMessage``
shapes it: every server message is a JSON object in a BINARY frame. The client's first frame
is ``setup`` (its ``model``), answered by ``setupComplete``. Client messages are named by
their JSON or their proto field names (``clientContent`` or ``client_content``: google-genai
sends the latter), as the API takes both. A turn (``clientContent`` with ``turnComplete``, or
``realtimeInput`` text, which the API answers with automatic activity detection on) streams
``serverContent.modelTurn.parts[].text`` at a fixed delay, then ``generationComplete``, then
``turnComplete`` with the turn's ``usageMetadata``. Errors are close codes with a reason: a
setup whose model ends in ``close`` is refused so."""

from __future__ import annotations

import time

from websockets.exceptions import ConnectionClosed
from websockets.sync.server import ServerConnection

from tests.ws_upstreams.wire import DELAY, Sender, Session, payload_of

__all__ = ["GEMINI_CLOSE", "GEMINI_PARTS", "GEMINI_USAGE", "serve_gemini"]

GEMINI_PARTS = ("Bon", "jour", " !")
GEMINI_USAGE = {
    "promptTokenCount": 9,
    "responseTokenCount": 5,
    "totalTokenCount": 14,
    "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 9}],
    "responseTokensDetails": [{"modality": "TEXT", "tokenCount": 5}],
}
GEMINI_CLOSE = 1008, "models/gemini-close is not found for API version v1beta"


def serve_gemini(ws: ServerConnection, session: Session, send: Sender) -> None:
    try:
        for msg in ws:
            obj = payload_of(session.got(msg))
            setup = obj.get("setup")
            realtime = obj.get("realtimeInput", obj.get("realtime_input"))
            if isinstance(setup, dict):
                if str(setup.get("model", "")).endswith("close"):
                    send.close(*GEMINI_CLOSE)
                    return
                send.json({"setupComplete": {}}, binary=True)
            elif _asks(obj.get("clientContent", obj.get("client_content"))) or (
                isinstance(realtime, dict) and "text" in realtime
            ):
                _turn(send)
    except ConnectionClosed:
        pass


def _asks(content: object) -> bool:
    """Client content that ends the user's turn (``turnComplete``) asks for an answer."""
    if not isinstance(content, dict):
        return False
    return content.get("turnComplete", content.get("turn_complete")) is True


def _turn(send: Sender) -> None:
    for text in GEMINI_PARTS:
        time.sleep(DELAY)
        turn = {"modelTurn": {"role": "model", "parts": [{"text": text}]}}
        send.json({"serverContent": turn}, binary=True)
    send.json({"serverContent": {"generationComplete": True}}, binary=True)
    done = {"serverContent": {"turnComplete": True}, "usageMetadata": GEMINI_USAGE}
    send.json(done, binary=True)
