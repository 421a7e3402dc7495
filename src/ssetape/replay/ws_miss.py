"""A client frame with no recorded counterpart: its miss, as HTTP misses are told
(:class:`~ssetape.replay.miss.Miss`: the log line, the typed JSON form), and the answer the
client gets at once, in its API's own way: an ``error`` event for OpenAI's Realtime API and
Responses WebSocket mode, a close with code 1008 (policy violation) and a reason for Gemini
Live, whose errors are close codes, and for any other protocol.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from ssetape.matching import Difference, differences
from ssetape.replay.miss import CLI_ADVICE, Advice, Candidate, Miss, MissKind
from ssetape.replay.ws_recording import ClientFrame

__all__ = [
    "MISS_CODE",
    "MISS_REASON",
    "POLICY",
    "FrameRules",
    "error_event",
    "frame_miss",
    "is_miss_close",
    "is_miss_event",
    "store_name",
]

POLICY = 1008  # the close code of a miss, where the protocol answers errors with closes
MISS_REASON = "ssetape replay miss"  # how such a close's reason begins
MISS_CODE = "ssetape_replay_miss"  # the ``error.code`` of a miss's `error` event
_MISS_EVENT = b'"code":"%s"' % MISS_CODE.encode()  # as error_event writes it
_NONE_LEFT = "<none: the recording has no more client frames here>"


def store_name(xid: int) -> str:
    """How a recording is named on a store: by its exchange id (the request index's
    default, and a session's)."""
    return f"#{xid}"


@dataclass(frozen=True)
class FrameRules:
    """How a session's client frames are matched and their misses told: the request
    index's ignored fields, its names for recordings, its advice, and where it keeps its
    misses (a test's report), if it does."""

    ignore: tuple[str, ...] = ()
    name: Callable[[int], str] = store_name
    advice: Advice = CLI_ADVICE
    misses: list[Miss] | None = field(default=None, compare=False)


def frame_miss(
    rules: FrameRules,
    request: str,
    number: int,
    recording: int,
    expected: ClientFrame | None,
    got: dict[str, Any],
) -> Miss:
    """The miss of the session's ``number``-th client frame (from 1), ``got`` as
    compared, against the recording's next one in its stream (``expected``)."""
    if expected is not None:
        diffs = tuple(differences(expected.canonical, got))
        which = f"client frame {expected.index + 1}"
    else:
        diffs = (Difference("message", _NONE_LEFT, got.get("message")),)
        which = "its end"
    near = Candidate(recording, rules.name(recording), f"{request}, {which}", diffs)
    said = f"client frame {number} of {request}"
    miss = Miss(MissKind.DIFFERS, said, rules.advice.again(), (near,))
    if rules.misses is not None:
        rules.misses.append(miss)
    return miss


def error_event(miss: Miss, number: int, payload: bytes) -> bytes:
    """An OpenAI ``error`` event that tells the miss (``error.event_id``: the client's id
    for the frame, ``payload``, as the API names the event that failed)."""
    try:
        doc = orjson.loads(payload)
    except orjson.JSONDecodeError:
        doc = None
    said = doc.get("event_id") if isinstance(doc, dict) else None
    error = {
        "type": "invalid_request_error",
        "code": MISS_CODE,
        "message": miss.message,
        "param": None,
        "event_id": said if isinstance(said, str) else None,
        "miss": miss.to_json(),
    }
    return orjson.dumps({"type": "error", "event_id": f"ssetape_miss_{number}", "error": error})


def is_miss_event(payload: bytes) -> bool:
    """Whether a server frame is a miss's `error` event (what a proxy in front of the replay
    server counts)."""
    return payload[:1] == b"{" and _MISS_EVENT in payload and b'"type":"error"' in payload


def is_miss_close(code: int | None, reason: str | None) -> bool:
    """Whether the server's close answered a miss."""
    return code == POLICY and (reason or "").startswith(MISS_REASON)
