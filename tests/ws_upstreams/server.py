"""The fake WebSocket upstream: one loopback server that answers each session as the API its
upgrade path names does (Gemini Live for ``...BidiGenerateContent``, the Responses API's
WebSocket mode for ``.../responses``, OpenAI Realtime for any other), over plain TCP or TLS.
It keeps every session with the frames it sent and received."""

from __future__ import annotations

import contextlib
import ssl
import threading
import time
from collections.abc import Iterator, Sequence
from urllib.parse import urlsplit

from websockets.sync.server import Server, ServerConnection, serve
from websockets.typing import Subprotocol

from tests.ws_upstreams.gemini import serve_gemini
from tests.ws_upstreams.realtime import serve_realtime
from tests.ws_upstreams.responses import serve_responses
from tests.ws_upstreams.wire import Sender, Session

__all__ = ["RealtimeUpstream"]


class RealtimeUpstream:
    def __init__(self) -> None:
        self.sessions: list[Session] = []
        self._server: Server | None = None

    @contextlib.contextmanager
    def running(self, *, tls: ssl.SSLContext | None = None) -> Iterator[str]:
        """Serve on a loopback port; yields its URL (the proxy's reverse target): http://,
        or https:// when ``tls`` (a server context) is given."""
        with serve(self._serve, "127.0.0.1", 0, select_subprotocol=_realtime, ssl=tls) as server:
            self._server = server
            threading.Thread(target=server.serve_forever, daemon=True).start()
            scheme = "https" if tls else "http"
            try:
                yield f"{scheme}://127.0.0.1:{server.socket.getsockname()[1]}"
            finally:
                server.shutdown()

    def _serve(self, ws: ServerConnection) -> None:
        assert ws.request is not None
        session = Session(
            ws.request.path, dict(ws.request.headers.raw_items()), opened=time.monotonic()
        )
        self.sessions.append(session)
        send = Sender(ws, session)
        path = urlsplit(ws.request.path).path.rstrip("/")
        if "BidiGenerateContent" in path:
            serve_gemini(ws, session, send)
        elif path.endswith("/responses"):
            serve_responses(ws, session, send)
        else:
            serve_realtime(ws, session, send)


def _realtime(ws: ServerConnection, offered: Sequence[Subprotocol]) -> Subprotocol | None:
    """``realtime`` when the client offers it (browsers do), else none (the SDK offers none)."""
    return next((p for p in offered if p == "realtime"), None)
