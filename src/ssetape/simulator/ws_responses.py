"""The Responses API's WebSocket mode (``/v1/responses``), as openai's ``client.responses
.connect()`` speaks it: the server says nothing until the client sends ``response.create``
(the create body without ``stream``/``background``), then streams the Responses events of
the HTTP API (``response.created``, ``response.in_progress``, the output item and part,
``response.output_text.delta`` :data:`~ssetape.simulator.ws_wire.DELAY` apart, the ``.done``
events, ``response.completed`` with usage), each with its own ``sequence_number``. Many
responses run on one socket: a ``response.create`` with a ``stream_id`` runs in that lane,
FIFO within it, and every event of it echoes the ``stream_id``; lanes run at once, so their
events interleave (the default lane echoes none). A ``previous_response_id`` this socket never
produced is refused with the ``previous_response_not_found`` error event (the
connection-local cache of ``store=False``).

The model picks how a response goes: the served model is the asked one with a snapshot date
(``gpt-5-mini`` → ``gpt-5-mini-2025-08-07``); ``gpt-missing`` is refused with an ``error``
event (status 404); ``fail`` streams two deltas then ``response.failed``; ``close`` closes
the socket with a code and reason after two deltas; ``cut`` closes TCP with no close frame
(the last three also as words after ``sim``). The answer echoes the input: ``You said:
<input>``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ssetape.simulator.ws_realtime import CLOSE_CODE, CLOSE_REASON
from ssetape.simulator.ws_wire import DELAY, Gone, Wire, asks, payload_of

__all__ = ["RESPONSES_USAGE", "SNAPSHOT", "reply", "serve_responses"]

SNAPSHOT = "-2025-08-07"  # what the API appends to the model asked for
RESPONSES_USAGE: dict[str, Any] = {  # openai's ResponseUsage
    "input_tokens": 21,
    "input_tokens_details": {"cached_tokens": 8, "cache_write_tokens": 0},
    "output_tokens": 6,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 27,
}
Ask = dict[str, Any]  # a client's response.create


def reply(text: str) -> tuple[str, ...]:
    """The deltas of the answer to an input ``text``."""
    return ("You", " said", ": ", text)


async def serve_responses(wire: Wire) -> None:
    done: set[str] = set()  # ids of the responses this socket completed: its cache
    lanes = _Lanes(lambda ask, start: _respond(wire, ask, start, done))
    try:
        while (got := await wire.receive()) is not None:
            ask = payload_of(got.payload)
            if ask.get("type") == "response.create":
                lanes.submit(ask, got.at)
    finally:
        await lanes.stop()


class _Lanes:
    """One task per ``stream_id``: a lane runs its responses in order, lanes at once."""

    def __init__(self, run: Callable[[Ask, float], Awaitable[bool]]) -> None:
        self._run = run
        self._queues: dict[object, asyncio.Queue[tuple[Ask, float]]] = {}
        self._tasks: list[asyncio.Task[None]] = []

    def submit(self, ask: Ask, at: float) -> None:
        lane = ask.get("stream_id")
        q = self._queues.get(lane)
        if q is None:
            q = self._queues[lane] = asyncio.Queue()
            self._tasks.append(asyncio.create_task(self._work(q)))
        q.put_nowait((ask, at))

    async def _work(self, q: asyncio.Queue[tuple[Ask, float]]) -> None:
        loop = asyncio.get_running_loop()
        free = loop.time()  # when the lane's last response ended
        while True:
            ask, at = await q.get()
            # From the ask, or from when the lane was free if it came while a response ran.
            if not await self._run(ask, max(at, free)):
                return
            free = loop.time()

    async def stop(self) -> None:
        """The session is over: a response still running has nowhere to go."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


class _Stream:
    """The events of one response, numbered, with its lane's ``stream_id``."""

    def __init__(self, wire: Wire, lane: object) -> None:
        self.wire, self.lane, self.seq = wire, lane, 0

    async def event(self, kind: str, **fields: Any) -> None:
        obj = {"type": kind, **fields, "sequence_number": self.seq}
        self.seq += 1
        await self.emit(obj)

    async def emit(self, obj: dict[str, Any]) -> None:
        if isinstance(self.lane, str):
            obj["stream_id"] = self.lane
        await self.wire.send_json(obj)


async def _respond(wire: Wire, ask: Ask, start: float, done: set[str]) -> bool:
    """One response; False once the socket is closed or cut."""
    try:
        return await _stream(wire, ask, start, done)
    except Gone:
        return False


async def _stream(wire: Wire, ask: Ask, start: float, done: set[str]) -> bool:
    s = _Stream(wire, ask.get("stream_id"))
    model = str(ask.get("model", ""))
    refused = _refused(model, ask.get("previous_response_id"), done)
    if refused is not None:  # a protocol error: no response began
        await s.emit({"type": "error", "status": refused[0], "error": refused[1]})
        return True
    rid, mid = wire.ident("resp"), wire.ident("msg")
    head = _response(rid, model + SNAPSHOT, ask)
    await s.event("response.created", response=head)
    await s.event("response.in_progress", response=head)
    item = {"id": mid, "type": "message", "status": "in_progress", "role": "assistant"}
    await s.event("response.output_item.added", output_index=0, item={**item, "content": []})
    at = {"item_id": mid, "output_index": 0, "content_index": 0}
    empty = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    await s.event("response.content_part.added", **at, part=empty)
    deltas = reply(_input_text(ask.get("input")))
    for i, delta in enumerate(deltas):
        await wire.until(start, DELAY * (i + 1))
        await s.event("response.output_text.delta", **at, delta=delta, logprobs=[])
        if i == 1 and asks(model, "close"):
            await wire.close(CLOSE_CODE, CLOSE_REASON)
            return False
        if i == 1 and asks(model, "cut"):
            await wire.cut()
            return False
        if i == 1 and asks(model, "fail"):
            error = {"code": "server_error", "message": "The server had an error."}
            await s.event("response.failed", response={**head, "status": "failed",
                                                       "error": error})  # fmt: skip
            return True
    text = "".join(deltas)
    await s.event("response.output_text.done", **at, text=text, logprobs=[])
    part = {**empty, "text": text}
    await s.event("response.content_part.done", **at, part=part)
    message = {**item, "status": "completed", "content": [part]}
    await s.event("response.output_item.done", output_index=0, item=message)
    whole = {**head, "status": "completed", "output": [message], "usage": RESPONSES_USAGE}
    await s.event("response.completed", response=whole)
    done.add(rid)
    return True


def _refused(model: str, previous: object, done: set[str]) -> tuple[int, dict[str, Any]] | None:
    """The status and error of a create the API refuses before any response begins."""
    if model == "gpt-missing":
        message = f"The model `{model}` does not exist or you do not have access to it."
        return 404, {"type": "invalid_request_error", "code": "model_not_found",
                     "message": message, "param": "model"}  # fmt: skip
    if previous is not None and previous not in done:
        message = f"Previous response with id '{previous}' not found."
        return 400, {"type": "invalid_request_error", "code": "previous_response_not_found",
                     "message": message, "param": "previous_response_id"}  # fmt: skip
    return None


def _response(rid: str, model: str, ask: Ask) -> dict[str, Any]:
    """The ``response`` object of openai's ``Response`` as it begins, as the API fills it."""
    return {
        "id": rid, "object": "response", "created_at": int(time.time()), "status": "in_progress",
        "background": False, "error": None, "incomplete_details": None,
        "instructions": ask.get("instructions"), "max_output_tokens": None, "model": model,
        "output": [], "parallel_tool_calls": True,
        "previous_response_id": ask.get("previous_response_id"),
        "reasoning": {"effort": None, "summary": None}, "store": ask.get("store", True),
        "temperature": 1.0, "text": {"format": {"type": "text"}}, "tool_choice": "auto",
        "tools": [], "top_p": 1.0, "truncation": "disabled", "usage": None, "user": None,
        "metadata": {},
    }  # fmt: skip


def _input_text(value: object) -> str:
    """The text of a create's ``input``: a string, or the last text of its items."""
    if isinstance(value, str):
        return value
    texts = []
    for item in value if isinstance(value, list) else ():
        content = item.get("content") if isinstance(item, dict) else None
        if isinstance(content, str):
            texts.append(content)
        for part in content if isinstance(content, list) else ():
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
    return texts[-1] if texts else ""
