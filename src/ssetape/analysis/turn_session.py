"""The running state of a WebSocket session's analysis, kept turn by turn (``analysis.turns``).

:class:`TurnAnalyzer` is the session analysis itself (:class:`~ssetape.analysis.sessions.
SessionAnalyzer`) over a :class:`TurnSession`: the per-API rules tell the session when a
turn is asked for, begins, carries content, reports usage, fails and ends, and the session
keeps each turn as a :class:`Turn` while it updates the figures the stored knowledge holds,
so a turn's TTFT is the one the knowledge counted for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ssetape.analysis.apis import UNKNOWN
from ssetape.analysis.profiles import Profile
from ssetape.analysis.session_rules import SessionRules
from ssetape.analysis.sessions import SessionAnalyzer, TextSession
from ssetape.analysis.tally import Tally, as_count
from ssetape.vocabulary import Outcome

__all__ = ["Turn", "TurnAnalyzer", "TurnSession"]

_ASKS_KEPT = 1000  # client frames that asked and are not answered yet, remembered by offset


def _ms(us: int | None) -> float | None:
    return None if us is None else round(us / 1000, 3)


@dataclass(slots=True)
class Turn:
    """One response of a session; offsets in µs from the upgrade request."""

    n: int  # its place in the session, from 1
    start_us: int
    asked_seq: int | None  # the client frame that asked for it, if one did
    first_seq: int  # the turn's first server frame
    ttft_us: int | None = None  # asking frame to first content
    first_content_us: int | None = None
    last_content_us: int | None = None
    gap_max_us: int | None = None  # between content frames of this turn only
    end_seq: int | None = None  # the frame that ended it (None: it never ended)
    end_us: int | None = None
    frames: int = 0  # server frames from its first to the one that ended it
    content_frames: int = 0
    audio_deltas: int = 0  # counted, never decoded
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    outcome: str | None = None  # vocabulary.Outcome
    reason: str | None = None

    @property
    def duration_us(self) -> int | None:
        return None if self.end_us is None else max(0, self.end_us - self.start_us)

    def doc(self) -> dict[str, Any]:
        """The turn for scripts and agents (milliseconds, as every document)."""
        return {
            "turn": self.n,
            "start_ms": _ms(self.start_us),
            "asked_seq": self.asked_seq,
            "first_seq": self.first_seq,
            "end_seq": self.end_seq,
            "ttft_ms": _ms(self.ttft_us),
            "duration_ms": _ms(self.duration_us),
            "gap_max_ms": _ms(self.gap_max_us),
            "frames": self.frames,
            "content_frames": self.content_frames,
            "audio_deltas": self.audio_deltas,
            "usage": {
                "input_tokens": self.input_tokens,
                "output_tokens": self.output_tokens,
                "total_tokens": self.total_tokens,
            },
            "outcome": None if self.outcome is None else str(self.outcome),
            "reason": self.reason,
        }


def _sum(total: int | None, value: int | None) -> int | None:
    return total if value is None else (total or 0) + value


class TurnSession(TextSession):
    """The session analysis' running state, also keeping each turn as the rules tell it.

    Responses WebSocket mode reads each response into a Tally of its own (``Session.turn``)
    and runs lanes (``stream_id``) at once, swapping the session's response state as their
    frames interleave: a turn is kept by its Tally, so each lane's stays its own. The other
    APIs run one turn at a time (key None)."""

    def __init__(self, api: str, profile: Profile, *, beta: bool, keep: int | None) -> None:
        self._turn_tally: Tally | None = None
        self._closing: Tally | None = None  # a Tally that just ended: end_turn follows
        super().__init__(api, profile, beta=beta)
        self.keep = keep
        self.turns: list[Turn] = []  # the first ``keep``
        self.total = 0
        self.open_turns: dict[int | None, tuple[Tally | None, Turn]] = {}
        self.done: Turn | None = None  # the last turn ended (usage may come after its end)
        self.ask_seqs: dict[int, int] = {}  # offset -> seq of the asks not answered yet
        # Of the message being read:
        self.carried = self.errored = self.asked_now = False
        self.ended: Turn | None = None
        self.audio_now = 0

    @property
    def turn(self) -> Tally | None:
        return self._turn_tally

    @turn.setter
    def turn(self, tally: Tally | None) -> None:
        before, self._turn_tally = self._turn_tally, tally
        if tally is None and before is not None and before.closed:
            self._closing = before

    def _key(self) -> tuple[int | None, Tally | None]:
        tally = self._turn_tally or self._closing
        return (None if tally is None else id(tally)), tally

    @property
    def open(self) -> Turn | None:
        """The turn of the response being read (its lane's, in Responses WebSocket mode)."""
        got = self.open_turns.get(self._key()[0])
        return None if got is None else got[1]

    def ask(self) -> None:
        super().ask()
        self.asked_now = True
        self.ask_seqs[self.now] = self.seq
        if len(self.ask_seqs) > _ASKS_KEPT:  # asks never answered: the oldest go
            del self.ask_seqs[next(iter(self.ask_seqs))]

    def begin_turn(self) -> None:
        if self.open is not None:  # a response began before the last one ended
            self._close(Outcome.INCOMPLETE, "another response began before it ended")
        super().begin_turn()
        self._open()

    def _open(self) -> Turn:
        asked_seq = None if self.asked is None else self.ask_seqs.pop(self.asked, None)
        t = Turn(
            n=self.total + 1,
            start_us=self.asked if self.asked is not None else self.now,
            asked_seq=asked_seq,
            first_seq=self.seq,
        )
        self.total += 1
        key, tally = self._key()
        self.open_turns[key] = (tally, t)
        if self.keep is None or len(self.turns) < self.keep:
            self.turns.append(t)
        return t

    def content(self) -> None:
        first = not self.in_turn or self.last is None
        asked = self.asked
        super().content()  # opens the turn (begin_turn) when none is
        t = self.open or self._open()
        if first:
            t.ttft_us = None if asked is None else self.now - asked
            t.first_content_us = self.now
        elif t.last_content_us is not None:
            gap = self.now - t.last_content_us
            t.gap_max_us = gap if t.gap_max_us is None else max(t.gap_max_us, gap)
        t.last_content_us = self.now
        t.content_frames += 1
        self.carried = True

    def end_turn(self) -> None:
        super().end_turn()
        tally = self._closing
        if self.open is not None:
            if tally is not None and tally.outcome is not None:
                # A completed response's reason is its status again ("completed"): none.
                why = None if tally.reason == tally.outcome else tally.reason
                self._close(tally.outcome, why)
            else:
                self._close(Outcome.COMPLETED, None)
        self._closing = None

    def _close(self, outcome: str, reason: str | None) -> None:
        _, t = self.open_turns.pop(self._key()[0])
        if t.outcome is None:  # an error the turn had stays its outcome
            t.outcome, t.reason = outcome, reason
        t.end_seq, t.end_us = self.seq, self.now
        self.done = self.ended = t

    def audio(self, delta: object) -> None:
        super().audio(delta)
        self.audio_now += 1

    def add_usage(
        self, inp: object, out: object, total: object, *, cached: object = None,
        reasoning: object = None,
    ) -> None:  # fmt: skip
        super().add_usage(inp, out, total, cached=cached, reasoning=reasoning)
        turn = self.open or self.done  # Gemini's may come after the turn's end
        if turn is not None:
            turn.input_tokens = _sum(turn.input_tokens, as_count(inp))
            turn.output_tokens = _sum(turn.output_tokens, as_count(out))
            turn.total_tokens = _sum(turn.total_tokens, as_count(total))

    def server_error(self, reason: str | None) -> None:
        super().server_error(reason)
        self.errored = True
        label = reason or "error"
        t = self.open
        if t is not None:
            if t.outcome is None:
                t.outcome, t.reason = Outcome.ERROR, label
        elif self.asked is not None and self.asked in self.ask_seqs:
            # A request refused before any response began: a turn of its own, ended here.
            self._open()
            self._close(Outcome.ERROR, label)


class TurnAnalyzer(SessionAnalyzer):
    """The session analysis with its running state kept turn by turn."""

    def __init__(self, *, keep: int | None, **kwargs: Any) -> None:
        self._keep = keep  # read by _begin, which the analyzer's constructor calls
        super().__init__(**kwargs)

    def _begin(self, rules: SessionRules | None) -> TextSession:
        beta = rules is not None and rules.beta(self._headers)
        name = rules.name if rules else UNKNOWN
        return TurnSession(name, self.profile, beta=beta, keep=self._keep)

    @property
    def state(self) -> TurnSession:
        s = self._session
        assert isinstance(s, TurnSession)
        return s

    @property
    def api(self) -> str | None:
        return self._rules.name if self._rules is not None else None
