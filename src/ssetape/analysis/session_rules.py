"""What the session analysis needs to know of one WebSocket API, and the state its rules update.

A WebSocket session (OpenAI Realtime, Responses WebSocket mode, Gemini Live) holds many
responses (turns) on one connection. Each API's module (:mod:`ssetape.analysis.realtime`,
:mod:`ssetape.analysis.gemini_live`) defines a :class:`SessionRules`; its functions read one
message and tell the :class:`Session` what it meant: a client frame that asked for an answer,
a turn begun or ended, content (what TTFT and gaps are measured on), usage, an error.
:mod:`ssetape.analysis.sessions` lists them and feeds them. Payloads come from the network:
the functions type-check every field they read and never raise on bad input.

Gaps are measured within a turn, never across the silence between two (a user who thinks
for 10 s is not a stall): docs/FIGURES.md.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ssetape.analysis.findings import FindingCode
from ssetape.analysis.profiles import Profile
from ssetape.analysis.tally import Tally, as_count

__all__ = [
    "CLOSED_BY_SERVER",
    "CLOSED_NORMALLY",
    "NORMAL",
    "Payload",
    "Session",
    "SessionRules",
    "close_note",
    "close_of",
    "server_close",
    "shown_error",
]

Payload = dict[str, Any]
NORMAL = frozenset({1000, 1001})  # closes that end a session as planned (RFC 6455 7.4.1)
# The notes the recorder stores in the exchange's error text for a session the server closed
# (addons.websockets), with its code and reason (no column holds them): with a code other
# than 1000/1001 the session failed, and the analysis reads the close as its outcome, live and
# in `ssetape reindex` alike; a normal close is no error (nothing shows or counts it as one)
# but tells the replay to close as the server did, rather than wait for the client.
CLOSED_BY_SERVER = "the server closed the WebSocket session: "
CLOSED_NORMALLY = "the server closed the WebSocket session normally: "


def close_note(code: int, reason: str | None) -> str:
    """The note of a server's close."""
    said = f"{code} {reason}".strip() if reason else str(code)
    return (CLOSED_NORMALLY if code in NORMAL else CLOSED_BY_SERVER) + said


def close_of(error: str | None) -> str | None:
    """``"1011 upstream overloaded"`` from a stored error text, if the server closed so with
    an error (a normal close is none)."""
    for note in (error or "").split("; "):
        if note.startswith(CLOSED_BY_SERVER):
            return note[len(CLOSED_BY_SERVER) :] or None
    return None


def server_close(error: str | None) -> tuple[int, str] | None:
    """The code and reason of any close the server ended the session with (normal or not),
    from a stored error text; None if the server did not close it (or the note names no code
    a close of its kind carries)."""
    for note in (error or "").split("; "):
        for prefix in (CLOSED_NORMALLY, CLOSED_BY_SERVER):
            if note.startswith(prefix):
                code, _, reason = note[len(prefix) :].partition(" ")
                if not code.isdigit() or (prefix == CLOSED_NORMALLY) != (int(code) in NORMAL):
                    return None
                return int(code), reason
    return None


def shown_error(error: str | None) -> str | None:
    """The stored error text as an error: without a normal close's note (None if that was
    all of it)."""
    if error is None or CLOSED_NORMALLY not in error:
        return error
    kept = [n for n in error.split("; ") if not n.startswith(CLOSED_NORMALLY)]
    return "; ".join(kept) or None


class Session:
    """Running state of one session's analysis; ``now`` and ``seq`` are the message's."""

    def __init__(self, api: str, profile: Profile, *, beta: bool = False) -> None:
        self.tally = Tally(api, profile)  # model, text, findings, summed usage
        self.beta = beta  # the client sent OpenAI-Beta: realtime=v1 (the beta event names)
        self.now = 0
        self.seq = 0
        self.model_asked: str | None = None  # the URL's ?model=, Gemini's setup.model
        self.asked: int | None = None  # offset of the client frame awaiting its answer
        self.in_turn = False
        self.last: int | None = None  # the turn's last content offset
        self.ttfts: list[int | None] = []  # per turn that carried content
        self.gaps = array("q")  # within turns only
        self.first_content: int | None = None
        self.responses = 0  # turns ended
        self.audio_deltas = 0
        self.audio_chars = 0  # of base64 audio: counted, never decoded
        self.error: str | None = None  # the first error the server sent
        self.turn: Tally | None = None  # a turn read by an HTTP API's rules (Responses)

    def ask(self) -> None:
        """A client frame that asks for an answer (response.create, clientContent)."""
        self.asked = self.now

    def begin_turn(self) -> None:
        self.in_turn, self.last = True, None

    def content(self) -> None:
        """The message carried content: TTFT for a turn's first, else a gap within it."""
        if not self.in_turn:
            self.begin_turn()
        if self.last is None:
            self.ttfts.append(None if self.asked is None else self.now - self.asked)
            self.asked = None
        else:
            self.gaps.append(self.now - self.last)
        if self.first_content is None:
            self.first_content = self.now
        self.last = self.now

    def end_turn(self) -> None:
        if self.in_turn:
            self.responses += 1
        self.in_turn, self.last = False, None

    def audio(self, delta: object) -> None:
        self.audio_deltas += 1
        self.audio_chars += len(delta) if isinstance(delta, str) else 0

    def add_usage(
        self, inp: object, out: object, total: object, *, cached: object = None,
        reasoning: object = None,
    ) -> None:  # fmt: skip
        """One response's counts, summed over the session's responses."""
        t = self.tally
        t.usage_seen = True
        t.input_tokens = _sum(t.input_tokens, inp)
        t.output_tokens = _sum(t.output_tokens, out)
        t.total_tokens = _sum(t.total_tokens, total)
        t.cache_read_tokens = _sum(t.cache_read_tokens, cached)
        t.reasoning_tokens = _sum(t.reasoning_tokens, reasoning)

    def server_error(self, reason: str | None) -> None:
        """An error the server sent: the session's outcome, and a finding where it came."""
        label = reason or "error"
        self.error = self.error or label
        self.tally.add(
            FindingCode.SERVER_ERROR, self.seq, f"The server sent an error: {label}."[:300]
        )


def _sum(total: int | None, value: object) -> int | None:
    n = as_count(value)
    return total if n is None else (total or 0) + n


@dataclass(frozen=True, slots=True)
class SessionRules:
    name: str  # the exchange's api
    # Upgrade request path suffixes (matched as ApiRules.paths are).
    paths: tuple[str, ...]
    # One message, parsed: (session, its kind, payload). ``client`` for a client frame
    # (an ask, a model), ``server`` for a server frame (everything else).
    client: Callable[[Session, str, Payload], None]
    server: Callable[[Session, str, Payload], None]
    # A message's kind: the payload's "type" (OpenAI), its first member (Gemini).
    kind: Callable[[Payload], str | None]
    # Whether the first server message's kind says the session is this API's, when the path
    # did not tell (a gateway route).
    claims: Callable[[str], bool]
    # Whether the session reads the older names (OpenAI-Beta: realtime=v1 sent).
    beta: Callable[[dict[str, str]], bool] = lambda headers: False
