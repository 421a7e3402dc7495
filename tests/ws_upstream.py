"""A fake WebSocket upstream that speaks as OpenAI's Realtime API does (GA event names), for
recording tests: ``session.created`` at once, then on each ``response.create`` a
``response.created``, text deltas at a fixed delay and ``response.done`` with usage. The
model the client asks for (``?model=``) picks how the session goes: ``ok``, an ``error``
event, a close with a code and reason, or a TCP cut without a close frame. A client that
sends a binary frame gets binary frames holding JSON (as Gemini Live answers).

It keeps every frame it sent and received, with when, so a test can compare them with what
was stored byte for byte.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

import orjson
from websockets.exceptions import ConnectionClosed
from websockets.sync.server import Server, ServerConnection, serve
from websockets.typing import Subprotocol

DELAY = 0.08  # seconds between two deltas
DELTAS = ("Hel", "lo", " there", "!")
USAGE = {  # openai's RealtimeResponseUsage
    "total_tokens": 31,
    "input_tokens": 12,
    "output_tokens": 19,
    "input_token_details": {"text_tokens": 12, "audio_tokens": 0, "cached_tokens": 4},
    "output_token_details": {"text_tokens": 19, "audio_tokens": 0},
}
# Gemini Live (path ...BidiGenerateContent): google-genai's LiveServerMessage shapes.
GEMINI_PARTS = ("Bon", "jour", " !")
GEMINI_USAGE = {"promptTokenCount": 9, "responseTokenCount": 5, "totalTokenCount": 14}
GEMINI_CLOSE = 1008, "models/gemini-close is not found for API version v1beta"
CLOSE_CODE, CLOSE_REASON = 1011, "upstream overloaded"


@dataclass
class Frame:
    binary: bool
    payload: bytes
    at: float  # time.monotonic() when sent or received


@dataclass
class Session:
    path: str
    headers: dict[str, str]
    sent: list[Frame] = field(default_factory=list)
    received: list[Frame] = field(default_factory=list)
    opened: float = 0.0


class RealtimeUpstream:
    def __init__(self) -> None:
        self.sessions: list[Session] = []
        self._server: Server | None = None

    @contextlib.contextmanager
    def running(self) -> Iterator[str]:
        """Serve on a loopback port; yields its http:// URL (the proxy's reverse target)."""
        with serve(self._serve, "127.0.0.1", 0, select_subprotocol=_realtime) as server:
            self._server = server
            threading.Thread(target=server.serve_forever, daemon=True).start()
            try:
                yield f"http://127.0.0.1:{server.socket.getsockname()[1]}"
            finally:
                server.shutdown()

    def _serve(self, ws: ServerConnection) -> None:
        assert ws.request is not None
        session = Session(
            ws.request.path, dict(ws.request.headers.raw_items()), opened=time.monotonic()
        )
        self.sessions.append(session)
        model = parse_qs(urlsplit(ws.request.path).query).get("model", ["ok"])[0]
        send = _Sender(ws, session)
        if "BidiGenerateContent" in ws.request.path:
            return self._gemini(send, ws, session)
        send.json({"type": "session.created", "event_id": "ev_1", "session": {"model": model}})
        n = 0
        try:
            for msg in ws:
                binary = isinstance(msg, bytes)
                raw = msg if isinstance(msg, bytes) else msg.encode()
                session.received.append(Frame(binary, raw, time.monotonic()))
                if binary:  # Gemini Live's way: JSON in binary frames
                    send.raw(orjson.dumps({"setupComplete": {}}), binary=True)
                    send.raw(orjson.dumps({"serverContent": {"turnComplete": True}}), binary=True)
                    continue
                if orjson.loads(raw).get("type") != "response.create":
                    continue
                n += 1
                if not self._respond(send, ws, model, f"resp_{n}"):
                    return
        except ConnectionClosed:
            pass

    def _respond(self, send: _Sender, ws: ServerConnection, model: str, rid: str) -> bool:
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
                # TCP closed with no close frame: a crashed upstream or a dropped link.
                ws.socket.shutdown(socket.SHUT_RDWR)
                ws.socket.close()
                return False
            if i == 1 and model == "close":
                ws.close(CLOSE_CODE, CLOSE_REASON)
                return False
        if model == "error":
            error = {"type": "server_error", "code": None, "message": "The server had an error"}
            send.json({"type": "error", "event_id": "ev_err", "error": error})
            return True
        done = {"id": rid, "object": "realtime.response", "status": "completed", "usage": USAGE}
        send.json({"type": "response.done", "event_id": f"ev_{rid}", "response": done})
        return True

    def _gemini(self, send: _Sender, ws: ServerConnection, session: Session) -> None:
        """Gemini Live: JSON in binary frames; a setup's model ``...close`` is refused with a
        close code, as the Live API refuses (its errors are close codes)."""
        try:
            for msg in ws:
                raw = msg if isinstance(msg, bytes) else msg.encode()
                session.received.append(Frame(isinstance(msg, bytes), raw, time.monotonic()))
                obj = orjson.loads(raw)
                if "setup" in obj:
                    if obj["setup"].get("model", "").endswith("close"):
                        ws.close(*GEMINI_CLOSE)
                        return
                    send.raw(orjson.dumps({"setupComplete": {}}), binary=True)
                elif "clientContent" in obj:
                    for text in GEMINI_PARTS:
                        time.sleep(DELAY)
                        turn = {"modelTurn": {"role": "model", "parts": [{"text": text}]}}
                        send.raw(orjson.dumps({"serverContent": turn}), binary=True)
                    done = {"serverContent": {"turnComplete": True}, "usageMetadata": GEMINI_USAGE}
                    send.raw(orjson.dumps(done), binary=True)
        except ConnectionClosed:
            pass


def _realtime(ws: ServerConnection, offered: Sequence[Subprotocol]) -> Subprotocol | None:
    """``realtime`` when the client offers it (browsers do), else none (the SDK offers none)."""
    return next((p for p in offered if p == "realtime"), None)


class _Sender:
    def __init__(self, ws: ServerConnection, session: Session) -> None:
        self._ws, self._session = ws, session

    def json(self, obj: object) -> None:
        self.raw(orjson.dumps(obj), binary=False)

    def raw(self, payload: bytes, *, binary: bool) -> None:
        self._session.sent.append(Frame(binary, payload, time.monotonic()))
        self._ws.send(payload if binary else payload.decode())
