"""Recorded WebSocket sessions for replay tests: written into a real SQLite store by the real
writer, as `ssetape record` stores them, and the direct replay server (in process, on a loop
of its own) that plays them to a real client."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime

from websockets.sync.client import ClientConnection

from ssetape.replay.direct_front import DirectFront
from ssetape.replay.faults import Faults
from ssetape.replay.request_index import RequestIndex
from ssetape.storage.messages import add_messages
from ssetape.storage.store import Store
from ssetape.storage.writer import Writer

UPSTREAM = "https://api.example"
REALTIME = "/v1/realtime"
GEMINI = "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent"
ASK = '{"type":"response.create"}'
# A Realtime session as the API answers it: session.created at once, the answer to
# response.create 1 ms after it, then deltas 80 ms apart.
ANSWER_MS = (1, 81, 161, 241)
ANSWER = (
    '{"type":"response.created","response":{"id":"resp_1"}}',
    '{"type":"response.output_text.delta","delta":"H\u00e9l"}',
    '{"type":"response.output_text.delta","delta":"lo"}',
    '{"type":"response.done","response":{"id":"resp_1","status":"completed"}}',
)
ASKED_MS = 30  # when the recorded client asked, from the upgrade request
MARGIN = 0.1  # seconds late, at most: a loaded 2-core machine


Frame = tuple[int, str, str | bytes]  # (ms from the upgrade, "client" or "server", payload)


def realtime_frames(asked_ms: int = ASKED_MS) -> list[Frame]:
    frames: list[Frame] = [(5, "server", '{"type":"session.created","session":{"model":"m"}}')]
    frames.append((asked_ms, "client", ASK))
    frames += [(asked_ms + ms, "server", text) for ms, text in zip(ANSWER_MS, ANSWER, strict=True)]
    return frames


def record(
    store: Store,
    uid: str,
    frames: Sequence[Frame],
    *,
    path: str = REALTIME,
    query: str = "model=m",
    state: str = "completed",
    error: str | None = None,
    end_ms: int | None = None,
    headers: Sequence[tuple[str, str]] = (),
) -> None:
    """One recorded session, as `ssetape record` stores it."""
    w = Writer(store)
    w.start()
    w.begin(
        uid, started_at=datetime.now(UTC), method="GET", scheme="https", host="api.example",
        port=443, path=path, query=query, http_version="HTTP/1.1",
        request_headers=[["authorization", "Bearer <redacted:x>"]], request_body=None,
        fingerprint="f" * 64,
    )  # fmt: skip
    recorded = [["Upgrade", "websocket"], ["Connection", "Upgrade"],
                ["Sec-WebSocket-Accept", "c3RhbGUgYWNjZXB0IHRva2Vu"],
                *([k, v] for k, v in headers)]  # fmt: skip
    w.update(uid, status=101, reason="Switching Protocols", response_headers=recorded,
             ttfb_us=2000, is_stream=False, transport="websocket")  # fmt: skip
    rows = [
        (i, ms * 1000, None, None, None, p.encode() if isinstance(p, str) else p, who,
         "text" if isinstance(p, str) else "binary")
        for i, (ms, who, p) in enumerate(frames)
    ]  # fmt: skip
    add_messages(w, uid, rows)
    end = end_ms if end_ms is not None else frames[-1][0] + 5
    w.finish(uid, state=state, error=error, duration_us=end * 1000)
    assert w.flush()
    w.close()


@contextlib.contextmanager
def serving(
    store: Store, *, speed: float = 1.0, ignore: Sequence[str] = (), faults: Sequence[str] = ()
) -> Iterator[str]:
    """The direct replay server on a loop of its own (``faults``: as ``--fault`` gives
    them); yields its ws:// URL."""
    front = DirectFront(store, RequestIndex(store, store.redactor(), ignore=ignore), UPSTREAM,
                        speed, faults=Faults(faults) or None)  # fmt: skip
    front.preload()
    loop = asyncio.new_event_loop()
    port = loop.run_until_complete(front.http.start("127.0.0.1", 0))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"ws://127.0.0.1:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(front.http.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def timed(ws: ClientConnection, n: int, since: float) -> list[tuple[float, str | bytes]]:
    """The next ``n`` messages, each with its arrival in seconds after ``since``."""
    out: list[tuple[float, str | bytes]] = []
    for _ in range(n):
        message = ws.recv(timeout=10)
        out.append((time.monotonic() - since, message))
    return out
