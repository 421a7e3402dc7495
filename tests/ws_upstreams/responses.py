"""The Responses API's WebSocket mode (``/v1/responses``), as openai's ``client.responses
.connect()`` speaks it: the server says nothing until the client sends ``response.create``
(the create body without ``stream``/``background``), then streams the Responses events of
the HTTP API (``response.created``, ``response.in_progress``, the output item and part,
``response.output_text.delta`` at a fixed delay, the ``.done`` events, ``response.completed``
with usage), each with its own ``sequence_number``. Many responses run on one socket: a
``response.create`` with a ``stream_id`` runs in that lane, FIFO within it, and every event of
it echoes the ``stream_id``; lanes run at once, so their events interleave (the default lane
echoes none). A ``previous_response_id`` this socket never produced is refused with the
``previous_response_not_found`` error event (the connection-local cache of ``store=False``).

The model picks how a response goes: the served model is the asked one with a snapshot date
(``gpt-5-mini`` → ``gpt-5-mini-2025-08-07``); ``gpt-missing`` is refused with an ``error``
event (status 400); ``fail`` streams two deltas then ``response.failed``; ``close`` closes
the socket with a code and reason after two deltas; ``cut`` closes TCP with no close frame.
The answer echoes the input: ``You said: <input>``."""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from websockets.exceptions import ConnectionClosed
from websockets.sync.server import ServerConnection

from tests.ws_upstreams.realtime import CLOSE_CODE, CLOSE_REASON
from tests.ws_upstreams.wire import DELAY, Sender, Session, cut, payload_of

__all__ = ["RESPONSES_USAGE", "SNAPSHOT", "reply", "serve_responses"]

SNAPSHOT = "-2025-08-07"  # what the API appends to the model asked for
RESPONSES_USAGE = {  # openai's ResponseUsage
    "input_tokens": 21,
    "input_tokens_details": {"cached_tokens": 8, "cache_write_tokens": 0},
    "output_tokens": 6,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 27,
}
_IDS = itertools.count(1)  # next() on a count is atomic: lanes draw ids from threads


def reply(text: str) -> tuple[str, ...]:
    """The deltas of the answer to an input ``text``."""
    return ("You", " said", ": ", text)


def serve_responses(ws: ServerConnection, session: Session, send: Sender) -> None:
    done: set[str] = set()  # ids of the responses this socket completed: its cache
    lanes = _Lanes(lambda obj: _respond(ws, send, obj, done))
    try:
        for msg in ws:
            obj = payload_of(session.got(msg))
            if obj.get("type") == "response.create":
                lanes.submit(obj)
    except ConnectionClosed:
        pass
    finally:
        lanes.stop()


class _Lanes:
    """One thread per ``stream_id``: a lane runs its responses in order, lanes at once."""

    def __init__(self, run: Callable[[dict[str, Any]], bool]) -> None:
        self._run = run
        self._queues: dict[object, queue.Queue[dict[str, Any] | None]] = {}
        self._threads: list[threading.Thread] = []

    def submit(self, obj: dict[str, Any]) -> None:
        lane = obj.get("stream_id")
        q = self._queues.get(lane)
        if q is None:
            q = self._queues[lane] = queue.Queue()
            t = threading.Thread(target=self._work, args=(q,), daemon=True)
            self._threads.append(t)
            t.start()
        q.put(obj)

    def _work(self, q: queue.Queue[dict[str, Any] | None]) -> None:
        while (obj := q.get()) is not None:
            try:
                if not self._run(obj):
                    return
            except ConnectionClosed:
                return

    def stop(self) -> None:
        for q in self._queues.values():
            q.put(None)
        for t in self._threads:
            t.join(10)


class _Stream:
    """The events of one response, numbered, with its lane's ``stream_id``."""

    def __init__(self, send: Sender, lane: object) -> None:
        self.send, self.lane, self.seq = send, lane, 0

    def event(self, kind: str, **fields: Any) -> None:
        obj = {"type": kind, **fields, "sequence_number": self.seq}
        self.seq += 1
        self.emit(obj)

    def emit(self, obj: dict[str, Any]) -> None:
        if isinstance(self.lane, str):
            obj["stream_id"] = self.lane
        self.send.json(obj)


def _respond(ws: ServerConnection, send: Sender, ask: dict[str, Any], done: set[str]) -> bool:
    """One response; False once the socket is closed or cut."""
    s = _Stream(send, ask.get("stream_id"))
    model = str(ask.get("model", ""))
    previous = ask.get("previous_response_id")
    refused = _refused(model, previous, done)
    if refused is not None:  # a protocol error: no response began
        s.emit({"type": "error", "status": refused[0], "error": refused[1]})
        return True
    rid, mid = f"resp_{next(_IDS):04d}", f"msg_{next(_IDS):04d}"
    head = _response(rid, model + SNAPSHOT, ask)
    s.event("response.created", response=head)
    s.event("response.in_progress", response=head)
    item = {"id": mid, "type": "message", "status": "in_progress", "role": "assistant"}
    s.event("response.output_item.added", output_index=0, item={**item, "content": []})
    at = {"item_id": mid, "output_index": 0, "content_index": 0}
    empty = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    s.event("response.content_part.added", **at, part=empty)
    deltas = reply(_input_text(ask.get("input")))
    for i, delta in enumerate(deltas):
        time.sleep(DELAY)
        s.event("response.output_text.delta", **at, delta=delta, logprobs=[])
        if i == 1 and model == "close":
            send.close(CLOSE_CODE, CLOSE_REASON)
            return False
        if i == 1 and model == "cut":
            cut(ws)
            return False
        if i == 1 and model == "fail":
            error = {"code": "server_error", "message": "The server had an error."}
            s.event("response.failed", response={**head, "status": "failed", "error": error})
            return True
    text = "".join(deltas)
    s.event("response.output_text.done", **at, text=text, logprobs=[])
    part = {**empty, "text": text}
    s.event("response.content_part.done", **at, part=part)
    message = {**item, "status": "completed", "content": [part]}
    s.event("response.output_item.done", output_index=0, item=message)
    whole = {**head, "status": "completed", "output": [message], "usage": RESPONSES_USAGE}
    s.event("response.completed", response=whole)
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


def _response(rid: str, model: str, ask: dict[str, Any]) -> dict[str, Any]:
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
