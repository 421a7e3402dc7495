"""Replay faults (:mod:`ssetape.replay.faults`) on a WebSocket session, sans-IO: what each kind
means where a recording is a conversation of frames rather than one stream, and the error each
session API sends in place of the rest.

A session's events are its recorded server frames, counted from the first in recorded order
(the client's frames are the client's to send); times are wall-clock, as for HTTP:

- ``cut:event=N``: the first N server frames go out as recorded, then TCP closes with no
  close frame (the client sees 1006, an abnormal closure); ``cut:ms=T``: the same T ms after
  the upgrade request came, whatever was due by then sent, whatever the recording's end.
- ``stall:event=N,ms=T``: the frames after the Nth that answer the same client frame as it
  (or an earlier one) come T ms late; an answer to a later client frame keeps its recorded
  delay from that frame, which the client sent late already.
- ``error:event=N``: in place of the rest, when the next frame would have come, the API's
  own error: OpenAI's Realtime API and Responses WebSocket mode send an ``error`` event
  (``server_error``), after which the session stays open and the server says nothing more,
  as they do; Gemini Live, whose errors are close codes, and any other protocol close with
  1011 (internal error) and a reason.
- ``status:429`` is no stream fault: the fronts answer the upgrade request with it instead of
  the 101, as an API refuses a handshake.

A cut or error past the last server frame comes right after it, instead of the recorded end.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from ssetape.analysis import realtime
from ssetape.replay.faults import Fault, FaultKind
from ssetape.replay.provider_errors import GOOGLE_FAILURE, OPENAI_FAILURE

__all__ = ["ERROR_CLOSE", "SessionFaults", "fault_event"]

# How a session errs that has no error event: 1011, "an unexpected condition" (RFC 6455
# 7.4.1), as Gemini Live closes on an internal error, with Google's own words.
ERROR_CLOSE = (1011, GOOGLE_FAILURE)
FAULT_EVENT_ID = "event_ssetape_fault"  # a Realtime server event's id


@dataclass(frozen=True, slots=True)
class Stall:
    after: int  # server frames before it
    hold: float  # seconds


@dataclass(frozen=True, slots=True)
class SessionFaults:
    """The faults one session is played with, in the order they were given: stalls add up,
    and the first cut or error ends the session (as the first ends an HTTP stream)."""

    stalls: tuple[Stall, ...] = ()
    ending: FaultKind | None = None  # CUT or ERROR: what replaces the rest
    after: int = 0  # server frames that go out before it (a cut by time: none counted)
    cut_at: float | None = None  # cut:ms: seconds after the upgrade request

    @classmethod
    def of(cls, faults: Sequence[Fault]) -> SessionFaults | None:
        stalls: list[Stall] = []
        for f in faults:
            if f.kind is FaultKind.STALL:
                stalls.append(Stall(f.after_event or 0, (f.ms or 0) / 1000))
            elif f.kind is FaultKind.CUT and f.ms is not None:
                return cls(tuple(stalls), FaultKind.CUT, cut_at=f.ms / 1000)
            elif f.kind in (FaultKind.CUT, FaultKind.ERROR):
                return cls(tuple(stalls), f.kind, f.after_event or 0)
        return cls(tuple(stalls)) if stalls else None

    @property
    def limit(self) -> int | None:
        """Server frames that may go out, at most (None: all of them)."""
        return self.after if self.ending is not None and self.cut_at is None else None

    def hold(self, index: int, anchors: Sequence[int]) -> float:
        """Seconds server frame ``index`` is held back by the stalls (``anchors``: the client
        frame each server frame answers), worked out as it comes due: nothing per frame is
        kept."""
        out = 0.0
        for s in self.stalls:
            if s.after >= len(anchors) or index < s.after:
                continue  # nothing comes after it, or the frame comes before it
            # The client frame the frame before the stall answers (the first's, at event=0).
            if anchors[index] <= anchors[max(s.after, 1) - 1]:
                out += s.hold
        return out


def fault_event(api: str | None, near: bytes | None, *, replaces: bool) -> bytes | None:
    """The payload of the ``error`` event the session's API sends in place of the rest, or
    None where it errs with a close (:data:`ERROR_CLOSE`). ``near``: the payload of the frame
    it replaces (``replaces``), or else of the last one before it: a Responses event follows
    its ``sequence_number`` and ``stream_id``."""
    if api == realtime.RULES.name:
        error = {"type": "server_error", "code": None, "message": OPENAI_FAILURE,
                 "param": None, "event_id": None}  # fmt: skip
        return orjson.dumps({"type": "error", "event_id": FAULT_EVENT_ID, "error": error})
    if api == realtime.RESPONSES_WS.name:
        return orjson.dumps(_responses_error(_object(near), replaces))
    return None  # Gemini Live, and any other protocol


def _responses_error(near: dict[str, Any], replaces: bool) -> dict[str, Any]:
    """Responses WebSocket mode's error event (openai's ``ResponseWsError``): an error emitted
    by a response stream carries its ``sequence_number`` (and its lane's ``stream_id``)."""
    error = {"type": "server_error", "code": "server_error", "message": OPENAI_FAILURE,
             "param": None}  # fmt: skip
    event: dict[str, Any] = {"type": "error", "error": error}
    seq = near.get("sequence_number")
    if isinstance(seq, int) and not isinstance(seq, bool):
        event["sequence_number"] = seq if replaces else seq + 1
    sid = near.get("stream_id")
    if isinstance(sid, str):
        event["stream_id"] = sid
    return event


def _object(payload: bytes | None) -> dict[str, Any]:
    if not payload or payload[:1] != b"{":
        return {}
    try:
        doc = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return {}
    return doc if isinstance(doc, dict) else {}
