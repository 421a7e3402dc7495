"""A fake OpenAI Realtime upstream for bench/bench_ws_aimock.py: one text session shaped like
the GA API's, with its timing planned in advance so the recording's offsets are known.

``session.created`` on connect; ``conversation.item.added`` for each
``conversation.item.create``; on ``response.create``: ``response.created`` after
``created_ms``, ``response.output_item.added`` and ``response.content_part.added`` just
after, the first ``response.output_text.delta`` at ``ttft_ms``, the next deltas
``gap_ms`` apart (a seeded jitter), the four ``*.done`` frames at once after the last delta
and ``response.done`` (with usage) ``usage_ms`` later. Every delay counts from when the
``response.create`` arrived (deadlines, not sleeps added up), so a slow wake-up is not
carried to the frames after it.

Every delta is the same number of characters ("01, ", "02, ", ...): aimock cuts a fixture's
text into chunks of one size, and equal deltas let it send the very texts recorded (the
best case for it; real deltas are uneven)."""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import orjson
from websockets.exceptions import ConnectionClosed
from websockets.sync.server import Server, ServerConnection, serve

__all__ = ["FakeRealtime", "Plan"]


@dataclass(frozen=True)
class Plan:
    deltas: int = 30
    created_ms: float = 45.0
    ttft_ms: float = 260.0
    gap_ms: tuple[float, float] = (20.0, 40.0)
    usage_ms: float = 15.0
    seed: int = 42
    model: str = "gpt-realtime"
    texts: list[str] = field(init=False)
    at_ms: list[float] = field(init=False)  # each delta's planned delay from response.create

    def __post_init__(self) -> None:
        rng = random.Random(self.seed)
        texts = [f"{i:02d}, " for i in range(1, self.deltas + 1)]
        at = [self.ttft_ms]
        for _ in range(self.deltas - 1):
            at.append(at[-1] + rng.uniform(*self.gap_ms))
        object.__setattr__(self, "texts", texts)
        object.__setattr__(self, "at_ms", at)


USAGE = {  # openai's RealtimeResponseUsage
    "total_tokens": 131,
    "input_tokens": 41,
    "output_tokens": 90,
    "input_token_details": {"text_tokens": 41, "audio_tokens": 0, "cached_tokens": 0},
    "output_token_details": {"text_tokens": 90, "audio_tokens": 0},
}


class FakeRealtime:
    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self._events = 0

    def _event_id(self) -> str:
        self._events += 1
        return f"event_CfAk{self._events:05d}Zq"

    def _send(self, ws: ServerConnection, event: dict[str, object]) -> None:
        ws.send(orjson.dumps({"type": event.pop("type"), "event_id": self._event_id(), **event})
                .decode())  # fmt: skip

    def handle(self, ws: ServerConnection) -> None:
        self._send(ws, {"type": "session.created", "session": {
            "type": "realtime", "object": "realtime.session", "id": "sess_CfAkBench0001",
            "model": self.plan.model, "output_modalities": ["text"], "instructions": "",
            "tools": [], "tool_choice": "auto", "max_output_tokens": "inf", "tracing": None,
            "prompt": None, "expires_at": 1796000000, "include": None,
        }})  # fmt: skip
        previous: str | None = None
        responses = 0
        try:
            for msg in ws:
                event = orjson.loads(msg)
                if event.get("type") == "conversation.item.create":
                    item = {"id": "item_CfAkUser01", "status": "completed", **event["item"]}
                    self._send(ws, {"type": "conversation.item.added",
                                    "previous_item_id": previous, "item": item})  # fmt: skip
                    previous = str(item["id"])
                elif event.get("type") == "response.create":
                    responses += 1
                    self._respond(ws, time.monotonic(), f"resp_CfAkBench{responses:03d}")
        except ConnectionClosed:
            pass

    def _respond(self, ws: ServerConnection, asked: float, rid: str) -> None:
        plan = self.plan

        def at(ms: float) -> None:
            time.sleep(max(0.0, asked + ms / 1000 - time.monotonic()))

        item_id = f"item_{rid[5:]}A"
        where = {"response_id": rid, "item_id": item_id, "output_index": 0, "content_index": 0}
        at(plan.created_ms)
        self._send(ws, {"type": "response.created", "response": {
            "id": rid, "object": "realtime.response", "status": "in_progress",
            "status_details": None, "output": [], "usage": None,
        }})  # fmt: skip
        item = {"id": item_id, "type": "message", "role": "assistant"}
        self._send(ws, {"type": "response.output_item.added", "response_id": rid,
                        "output_index": 0,
                        "item": {**item, "status": "in_progress", "content": []}})  # fmt: skip
        self._send(ws, {"type": "response.content_part.added", **where,
                        "part": {"type": "output_text", "text": ""}})  # fmt: skip
        for text, ms in zip(plan.texts, plan.at_ms, strict=True):
            at(ms)
            self._send(ws, {"type": "response.output_text.delta", **where, "delta": text})
        whole = "".join(plan.texts)
        part = {"type": "output_text", "text": whole}
        done_item = {**item, "status": "completed", "content": [part]}
        self._send(ws, {"type": "response.output_text.done", **where, "text": whole})
        self._send(ws, {"type": "response.content_part.done", **where, "part": part})
        self._send(ws, {"type": "response.output_item.done", "response_id": rid,
                        "output_index": 0, "item": done_item})  # fmt: skip
        self._send(ws, {"type": "conversation.item.done",
                        "item": {**done_item, "object": "realtime.item"}})  # fmt: skip
        at(plan.at_ms[-1] + plan.usage_ms)
        self._send(ws, {"type": "response.done", "response": {
            "id": rid, "object": "realtime.response", "status": "completed",
            "output": [done_item], "usage": USAGE,
        }})  # fmt: skip

    def running(self) -> contextlib.AbstractContextManager[str]:
        """Serve on a loopback port; yields its http:// URL (a reverse proxy's target)."""
        return serving(self.handle)


@contextlib.contextmanager
def serving(handle: Callable[[ServerConnection], None]) -> Iterator[str]:
    """A WebSocket server of ``handle`` on a loopback port, in a thread; yields its http://
    URL (a reverse proxy's target)."""
    server: Server
    with serve(handle, "127.0.0.1", 0) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            yield f"http://127.0.0.1:{server.socket.getsockname()[1]}"
        finally:
            server.shutdown()
