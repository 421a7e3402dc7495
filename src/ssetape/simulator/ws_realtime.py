"""OpenAI's Realtime API (``/v1/realtime?model=M``, GA event names), as openai's
``client.realtime.connect(model=M)`` meets it.

``session.created`` at once; ``session.update`` is answered by ``session.updated`` and
``conversation.item.create`` by ``conversation.item.added``; each ``response.create`` by a
response as its :class:`RealtimePlan` times it, counted from the ``response.create``:
``response.created``, the text deltas, ``response.done`` with usage (and with ``items``, the
output item and content part frames the GA API sends around the deltas). By default the
deltas are :data:`DELTAS`, :data:`~ssetape.simulator.ws_wire.DELAY` apart and the first
``DELAY`` after the ask; a bench times them as it needs (``Simulator(realtime=...)``).

The model asked for (``?model=``) picks how each response goes: ``error`` ends it with an
``error`` event after the deltas, ``close`` closes the socket with :data:`CLOSE_CODE` and
:data:`CLOSE_REASON` after two deltas, ``cut`` closes TCP there with no close frame (the
same words after ``sim`` do too: ``gpt-realtime-sim-cut``); anything else completes. A client
that sends a binary frame gets two binary frames holding JSON, as Gemini Live answers.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson

from ssetape.simulator.ws_wire import DELAY, Gone, Wire, asks, payload_of

__all__ = ["CLOSE_CODE", "CLOSE_REASON", "DELTAS", "USAGE", "RealtimePlan", "serve_realtime"]

DELTAS = ("Hel", "lo", " there", "!")
USAGE: Mapping[str, Any] = {  # openai's RealtimeResponseUsage
    "total_tokens": 31,
    "input_tokens": 12,
    "output_tokens": 19,
    "input_token_details": {"text_tokens": 12, "audio_tokens": 0, "cached_tokens": 4},
    "output_token_details": {"text_tokens": 19, "audio_tokens": 0},
}
CLOSE_CODE, CLOSE_REASON = 1011, "upstream overloaded"


@dataclass(frozen=True)
class RealtimePlan:
    """How every response of a session goes. Times are seconds at speed 1 from the
    ``response.create`` (deadlines: a slow wake-up is not carried to the frames after it)."""

    texts: tuple[str, ...] = DELTAS
    at: tuple[float, ...] = tuple(DELAY * (i + 1) for i in range(len(DELTAS)))  # each delta's
    created: float = 0.0  # ``response.created`` (and the item frames that follow it)
    done: float = 0.0  # ``response.done``, after the last delta
    usage: Mapping[str, Any] = field(default_factory=lambda: USAGE)
    items: bool = False  # the output item and content part frames, as the GA API sends

    def __post_init__(self) -> None:
        if len(self.texts) != len(self.at) or not self.texts:
            raise ValueError("a plan needs one time per delta, and a delta at least")

    @classmethod
    def jittered(
        cls, texts: tuple[str, ...], *, first: float, gap: tuple[float, float], seed: int,
        **rest: Any,
    ) -> RealtimePlan:  # fmt: skip
        """The first delta at ``first``, each next one a seeded uniform ``gap`` later."""
        rng = random.Random(seed)
        at = [first]
        for _ in texts[1:]:
            at.append(at[-1] + rng.uniform(*gap))
        return cls(texts=texts, at=tuple(at), **rest)


async def serve_realtime(wire: Wire, plan: RealtimePlan) -> None:
    model = parse_qs(urlsplit(wire.path).query).get("model", ["ok"])[0]
    session = _session(wire.ident("sess"), model)
    await _event(wire, "session.created", session=session)
    previous: str | None = None  # the conversation's last item
    finished = wire.now()  # when the last response ended: the next counts from then at most
    while (got := await wire.receive()) is not None:
        if got.binary:  # Gemini Live's way: JSON in binary frames
            await wire.send(orjson.dumps({"setupComplete": {}}), binary=True)
            await wire.send(orjson.dumps({"serverContent": {"turnComplete": True}}), binary=True)
            continue
        event = payload_of(got.payload)
        # What the two events the API acknowledges carry: a session update, or an item.
        kind, body = event.get("type"), event.get("session", event.get("item"))
        if kind == "session.update" and isinstance(body, dict):
            session = {**session, **body}
            await _event(wire, "session.updated", session=session)
        elif kind == "conversation.item.create" and isinstance(body, dict):
            item = {"id": wire.ident("item"), "status": "completed", **body}
            await _event(wire, "conversation.item.added", previous_item_id=previous, item=item)
            previous = str(item["id"])
        elif kind == "response.create":
            if not await _respond(wire, plan, model, max(got.at, finished)):
                return
            finished = wire.now()


async def _respond(wire: Wire, plan: RealtimePlan, model: str, asked: float) -> bool:
    """One response; False once the session is over (closed or cut)."""
    rid = wire.ident("resp")
    item_id = wire.ident("item")
    where = {"response_id": rid, "item_id": item_id, "output_index": 0, "content_index": 0}
    item = {"id": item_id, "type": "message", "role": "assistant"}
    try:
        await wire.until(asked, plan.created)
        await _event(wire, "response.created", response={
            "id": rid, "object": "realtime.response", "status": "in_progress",
            "status_details": None, "output": [], "usage": None,
        })  # fmt: skip
        if plan.items:
            added = {**item, "status": "in_progress", "content": []}
            await _event(wire, "response.output_item.added", response_id=rid, output_index=0,
                         item=added)  # fmt: skip
            await _event(wire, "response.content_part.added", **where,
                         part={"type": "output_text", "text": ""})  # fmt: skip
        for i, (text, at) in enumerate(zip(plan.texts, plan.at, strict=True)):
            await wire.until(asked, at)
            await _event(wire, "response.output_text.delta", **where, delta=text)
            if i == 1 and asks(model, "cut"):
                await wire.cut()
                return False
            if i == 1 and asks(model, "close"):
                await wire.close(CLOSE_CODE, CLOSE_REASON)
                return False
        if asks(model, "error"):
            error = {"type": "server_error", "code": None, "message": "The server had an error"}
            await _event(wire, "error", error=error)
            return True
        whole = "".join(plan.texts)
        part = {"type": "output_text", "text": whole}
        done_item = {**item, "status": "completed", "content": [part]}
        if plan.items:
            await _event(wire, "response.output_text.done", **where, text=whole)
            await _event(wire, "response.content_part.done", **where, part=part)
            await _event(wire, "response.output_item.done", response_id=rid, output_index=0,
                         item=done_item)  # fmt: skip
            await _event(wire, "conversation.item.done",
                         item={**done_item, "object": "realtime.item"})  # fmt: skip
        await wire.until(asked, plan.at[-1] + plan.done)
        await _event(wire, "response.done", response={
            "id": rid, "object": "realtime.response", "status": "completed",
            "output": [done_item] if plan.items else [], "usage": dict(plan.usage),
        })  # fmt: skip
        return True
    except Gone:
        return False


async def _event(wire: Wire, kind: str, **fields: Any) -> None:
    """A server event: its type and id first, as the API orders them."""
    await wire.send_json({"type": kind, "event_id": wire.ident("event"), **fields})


def _session(sid: str, model: str) -> dict[str, Any]:
    """The ``session`` of ``session.created``, as the GA API fills it for a text session."""
    return {
        "type": "realtime", "object": "realtime.session", "id": sid, "model": model,
        "output_modalities": ["text"], "instructions": "", "tools": [], "tool_choice": "auto",
        "max_output_tokens": "inf", "tracing": None, "prompt": None, "expires_at": 1796000000,
        "include": None,
    }  # fmt: skip
