"""The turns of a WebSocket session: each response, when it was asked for and how it went.

A session (OpenAI Realtime, Responses WebSocket mode, Gemini Live) holds many responses on one
connection. Each is a turn: Realtime's ``response.create`` answered from ``response.created``
to ``response.done``, a Responses ``response.create`` to its terminal (``response.completed``),
a Gemini ``clientContent`` to ``turnComplete``. A turn has its start (the offset of the client
frame that asked, else of its first server frame), TTFT (from that client frame to the first
content), duration, longest gap (between content frames of that turn only: the silence between
two turns is a user thinking, not a stall), usage and outcome.

They are derived here, and only here, by the session analysis itself
(:class:`~ssetape.analysis.sessions.SessionAnalyzer`, whose per-API rules say when a turn
begins, carries content and ends): a turn's TTFT is the one the stored knowledge counted for
it. The stored knowledge keeps the session's totals, not its turns, so every surface derives
them from the stored messages (``storage.turns``) with :meth:`SessionTurns.read`; memory stays
bounded by ``keep`` turns, whatever the session's length.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson

from ssetape.analysis.profiles import Profile, profile_for, profile_or_none
from ssetape.analysis.rules.payload import as_dict, as_str
from ssetape.analysis.session_rules import close_of
from ssetape.analysis.sessions import CUT
from ssetape.analysis.turn_session import Turn, TurnAnalyzer
from ssetape.storage.models import Exchange
from ssetape.storage.turns import SessionMessage, TurnReads
from ssetape.vocabulary import Direction, ExchangeState, Opcode, Outcome

__all__ = ["ENDED_OPEN", "TURNS_KEPT", "Lane", "MessageFacts", "SessionTurns", "Turn", "TurnScan"]

TURNS_KEPT = 1000  # turns a read keeps by default (every one is counted)
ENDED_OPEN = "the session closed before the turn ended"
# Realtime's response.done statuses that are not a completed response (failed is an error the
# rules report themselves); a cancel is the client's (response.cancel) or a barge-in's.
_REALTIME_STATUS = {"cancelled": Outcome.ABORTED, "incomplete": Outcome.INCOMPLETE}
_TRANSPORT: dict[str, tuple[str, str | None]] = {
    ExchangeState.TRUNCATED: (Outcome.CUT, CUT),
    ExchangeState.ABORTED: (Outcome.ABORTED, None),
    ExchangeState.INTERRUPTED: (Outcome.INTERRUPTED, None),
    ExchangeState.FAILED: (Outcome.NO_RESPONSE, None),
}


@dataclass(slots=True)
class Lane:
    """The frames one side sent: counted by opcode, and their payload bytes."""

    frames: int = 0
    text: int = 0
    binary: int = 0
    bytes: int = 0

    def add(self, opcode: str | None, size: int) -> None:
        self.frames += 1
        self.bytes += size
        if opcode == Opcode.BINARY:
            self.binary += 1
        else:
            self.text += 1

    def doc(self) -> dict[str, int]:
        return {"frames": self.frames, "text": self.text, "binary": self.binary,
                "bytes": self.bytes}  # fmt: skip


class MessageFacts(NamedTuple):
    """What one message was to the analysis: whether it carried content (what TTFT and gaps
    are measured on), the turn it belongs to (None: between turns, or a client frame),
    whether it was an error the server sent, and whether a client frame asked for a turn."""

    carried: bool
    turn: int | None
    error: bool
    asked: bool = False


class TurnScan:
    """Reads a session's messages in order, as the analysis does, and keeps its turns."""

    def __init__(
        self,
        *,
        path: str,
        query: str | None,
        request_headers: list[list[str]] | None,
        profile: Profile | None,
        keep: int | None = TURNS_KEPT,
    ) -> None:
        self._analyzer = TurnAnalyzer(
            keep=keep, path=path, query=query, request_headers=request_headers, profile=profile
        )
        self.client, self.server = Lane(), Lane()
        self.last_us = 0

    @classmethod
    def of(cls, x: Exchange, *, keep: int | None = TURNS_KEPT) -> TurnScan:
        """For a stored session, under the profile it was analysed with."""
        profile = profile_or_none(x.profile) or profile_for(x.host)
        return cls(path=x.path, query=x.query, request_headers=x.request_headers,
                   profile=profile, keep=keep)  # fmt: skip

    def message(
        self, seq: int, offset_us: int, direction: str | None, data: str | None, *,
        event: str | None = None, opcode: str | None = None, size: int = 0,
    ) -> MessageFacts:  # fmt: skip
        """One stored message, fed in order (``direction`` None: a server message)."""
        client = direction == Direction.CLIENT
        (self.client if client else self.server).add(opcode, size)
        self.last_us = max(self.last_us, offset_us)
        s = self._analyzer.state
        s.carried = s.errored = s.asked_now = False
        s.ended = None
        s.audio_now = 0
        self._analyzer.message(seq, offset_us, Direction.CLIENT if client else None, data)
        s = self._analyzer.state  # a new one when the first answer named the API
        if client:
            return MessageFacts(False, None, False, s.asked_now)
        turn = s.open or s.ended
        if turn is not None:
            turn.frames += 1
            turn.audio_deltas += s.audio_now
            if s.ended is turn and event == "response.done" and data is not None:
                self._realtime_status(turn, data)
        return MessageFacts(s.carried, None if turn is None else turn.n, s.errored)

    def _realtime_status(self, turn: Turn, data: str) -> None:
        """A Realtime response cancelled or cut short is not a completed one."""
        if self._analyzer.api != "openai_realtime" or turn.outcome != Outcome.COMPLETED:
            return
        try:
            response = as_dict(as_dict(orjson.loads(data)).get("response"))
        except orjson.JSONDecodeError:
            return
        status = as_str(response.get("status"))
        if status in _REALTIME_STATUS:
            why = as_str(as_dict(response.get("status_details")).get("reason"))
            turn.outcome, turn.reason = _REALTIME_STATUS[status], why or status

    def finish(self, *, state: str, error: str | None, end_us: int | None) -> SessionTurns:
        """The turns so far; one still open ends as the session did (``state``, ``error``:
        the exchange's) at ``end_us`` (its duration), or is ``recording`` while it goes on."""
        s = self._analyzer.state
        for _, t in s.open_turns.values():  # a lane each, in Responses WebSocket mode
            if state == ExchangeState.RECORDING:
                t.outcome = t.outcome or Outcome.RECORDING
                t.end_us = None
                continue
            closed = close_of(error)
            if t.outcome is None:
                if closed is not None:
                    t.outcome, t.reason = Outcome.ERROR, closed
                else:
                    t.outcome, t.reason = _TRANSPORT.get(state, (Outcome.ABORTED, ENDED_OPEN))
            t.end_us = max(end_us or 0, self.last_us)
        return SessionTurns(
            api=self._analyzer.api,
            turns=s.turns,
            total=s.total,
            client=self.client,
            server=self.server,
            audio_deltas=s.audio_deltas,
        )


@dataclass(slots=True)
class SessionTurns:
    """A session's turns (the first ``keep`` of ``total``) and the frames of each lane."""

    api: str | None
    turns: list[Turn]
    total: int
    client: Lane = field(default_factory=Lane)
    server: Lane = field(default_factory=Lane)
    audio_deltas: int = 0

    @classmethod
    def read(
        cls,
        reads: TurnReads,
        x: Exchange,
        *,
        keep: int | None = TURNS_KEPT,
        each: Callable[[SessionMessage, MessageFacts], None] | None = None,
    ) -> SessionTurns:
        """The turns of stored session ``x``, its messages read a page at a time; ``each``
        sees every message with what it was (the timeline counts its frames so, in the same
        pass)."""
        scan = TurnScan.of(x, keep=keep)
        for m in reads.messages(x.id):
            facts = scan.message(m.seq, m.offset_us, m.direction, m.data, event=m.event,
                                 opcode=m.opcode, size=m.size)  # fmt: skip
            if each is not None:
                each(m, facts)
        return scan.finish(state=x.state, error=x.error, end_us=x.duration_us)

    def doc(self, shown: int | None) -> dict[str, Any]:
        """For `show --json`: the frames of each lane, the first ``shown`` turns (all kept with
        None) and how many there were."""
        turns = self.turns if shown is None else self.turns[:shown]
        return {
            "frames": {"client": self.client.doc(), "server": self.server.doc()},
            "audio_deltas": self.audio_deltas,
            "turns": [t.doc() for t in turns],
            "turns_total": self.total,
        }
