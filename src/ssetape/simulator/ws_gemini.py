"""Gemini's Live API (``/ws/google.ai.generativelanguage.v1beta.GenerativeService
.BidiGenerateContent``, ``v1`` and ``...Constrained`` too), as google-genai's
``client.aio.live.connect`` meets it and its ``LiveServerMessage`` shapes it: every server
message is a JSON object in a BINARY frame.

The client's first frame is ``setup`` (its ``model``), answered by ``setupComplete``. Client
messages are named by their JSON or their proto field names (``clientContent`` or
``client_content``: google-genai sends the latter), as the API takes both. A turn
(``clientContent`` with ``turnComplete``, or ``realtimeInput`` text, which the API answers
with automatic activity detection on) streams ``serverContent.modelTurn.parts[].text``
:data:`~ssetape.simulator.ws_wire.DELAY` apart from the turn's frame, then
``generationComplete``, then ``turnComplete`` with the turn's ``usageMetadata``. Errors are
close codes with a reason: a setup whose model ends in ``close`` (or has it after ``sim``) is
refused so, with :data:`GEMINI_CLOSE`.
"""

from __future__ import annotations

from typing import Any

from ssetape.simulator.ws_wire import DELAY, Wire, asks, payload_of

__all__ = ["GEMINI_CLOSE", "GEMINI_PARTS", "GEMINI_USAGE", "serve_gemini"]

GEMINI_PARTS = ("Bon", "jour", " !")
GEMINI_USAGE: dict[str, Any] = {
    "promptTokenCount": 9,
    "responseTokenCount": 5,
    "totalTokenCount": 14,
    "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 9}],
    "responseTokensDetails": [{"modality": "TEXT", "tokenCount": 5}],
}
GEMINI_CLOSE = 1008, "models/gemini-close is not found for API version v1beta"


async def serve_gemini(wire: Wire) -> None:
    finished = wire.now()  # when the last turn ended: the next counts from then at most
    while (got := await wire.receive()) is not None:
        obj = payload_of(got.payload)
        setup = obj.get("setup")
        realtime = obj.get("realtimeInput", obj.get("realtime_input"))
        if isinstance(setup, dict):
            model = str(setup.get("model", ""))
            if model.endswith("close") or asks(model, "close"):
                await wire.close(*GEMINI_CLOSE)
                return
            await wire.send_json({"setupComplete": {}}, binary=True)
        elif _asks(obj.get("clientContent", obj.get("client_content"))) or (
            isinstance(realtime, dict) and "text" in realtime
        ):
            await _turn(wire, max(got.at, finished))
            finished = wire.now()


def _asks(content: object) -> bool:
    """Client content that ends the user's turn (``turnComplete``) asks for an answer."""
    if not isinstance(content, dict):
        return False
    return content.get("turnComplete", content.get("turn_complete")) is True


async def _turn(wire: Wire, asked: float) -> None:
    for i, text in enumerate(GEMINI_PARTS):
        await wire.until(asked, DELAY * (i + 1))
        turn = {"modelTurn": {"role": "model", "parts": [{"text": text}]}}
        await wire.send_json({"serverContent": turn}, binary=True)
    await wire.send_json({"serverContent": {"generationComplete": True}}, binary=True)
    done = {"serverContent": {"turnComplete": True}, "usageMetadata": GEMINI_USAGE}
    await wire.send_json(done, binary=True)
