"""Why a request has no recording to replay, as a value: built by the request index, carried
to whoever answers the request (the proxy, the direct replay server, the pytest plugin) and
rendered there, once, in the words of the command the user ran.

A miss names recordings the way its reader knows them: ``#12`` on a store, ``cassette line
3`` in a test (the index is told which), so the 404's body, the log and a test's report name
one recording one way. Its JSON form (:meth:`Miss.to_json`, :meth:`Miss.from_json`) is what
crosses a process boundary; nothing parses the rendered text back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

import orjson

from ssetape.matching import Difference, one_line
from ssetape.vocabulary import RecordMode

__all__ = ["CLI_ADVICE", "Advice", "Candidate", "Miss", "MissKind", "Unreplayable"]


class MissKind(StrEnum):
    DIFFERS = "differs"  # recordings exist; the nearest differs in some fields
    FAILED = "failed"  # this very request was recorded, but nothing of it can be replayed
    CUT = "cut"  # recording new episodes: its only recordings are cut, so record it again
    EXHAUSTED = "exhausted"  # all its recordings were served (repeat off)
    UNREPLAYABLE = "unreplayable"  # the tape holds only recordings that cannot be replayed
    EMPTY = "empty"
    ERROR = "error"  # the lookup itself failed


@dataclass(frozen=True, slots=True)
class Advice:
    """What a miss tells the user to do, in the words of the command they ran."""

    record: str  # the option that records what is missing
    ignore: str  # the option that leaves volatile fields out of matching
    listing: str  # the command that lists the tape's recordings

    def as_dict(self) -> dict[str, str]:
        return {"record": self.record, "ignore": self.ignore, "listing": self.listing}

    def again(self) -> Advice:
        """For what the tape holds but that differs mid-way (a session's client frame): the
        mode that records it anew, since new_episodes records only what is missing whole."""
        mode = self.record.replace(RecordMode.NEW_EPISODES.value, RecordMode.ALL.value)
        return replace(self, record=mode)


CLI_ADVICE = Advice("--record-mode new_episodes", "--ignore-field", "ssetape list")


@dataclass(frozen=True, slots=True)
class Candidate:
    """A recording near the request: its id, its name for the reader, and how it differs."""

    id: int
    name: str  # "#12", "cassette line 3"
    request: str  # "POST http://127.0.0.1:8080/v1/chat/completions"
    differences: tuple[Difference, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "request": self.request,
                "differences": [d.as_dict() for d in self.differences]}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Unreplayable:
    """A recording of this very request that cannot be served, and why."""

    id: int
    name: str
    state: str  # the exchange's state: failed, interrupted, ...
    why: str  # "failed (connection refused)", "has no stored response", ...

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "state": self.state, "why": self.why}


@dataclass(frozen=True, slots=True)
class Miss:
    kind: MissKind
    request: str  # what was asked: "POST host:port/path"
    advice: Advice = CLI_ADVICE
    nearest: tuple[Candidate, ...] = ()
    own: tuple[Unreplayable, ...] = ()  # FAILED: the request's own recordings
    count: int = 0  # EXHAUSTED: recordings served; UNREPLAYABLE: recordings on the tape
    detail: str = ""  # ERROR: what went wrong

    @classmethod
    def error(cls, request: str, exc: BaseException, advice: Advice = CLI_ADVICE) -> Miss:
        return cls(MissKind.ERROR, request, advice, detail=f"{type(exc).__name__}: {exc}")

    @property
    def message(self) -> str:
        return self.render()

    def render(self, *, advice: bool = True) -> str:
        """One printable line; ``advice`` off leaves out the closing sentence of what to do
        (a report that says it once for all its misses)."""
        a, what = self.advice, self.request
        if self.kind is MissKind.ERROR:
            return one_line(f"ssetape could not look {what} up: {self.detail}")
        if self.kind is MissKind.EXHAUSTED:
            return one_line(
                f"no recording left for {what}: its {self.count} recording(s) were all served "
                "(ssetape_repeat is off)"
            )
        if self.kind is MissKind.CUT:
            names = ", ".join(u.name for u in self.own)
            return one_line(
                f"recording {what} again: its recording(s) on the tape ({names}) were cut "
                "short (the upstream closed the stream, or the recorder stopped first)"
            )
        if self.kind is MissKind.FAILED:
            ones = ", ".join(f"its recording ({u.name}) {u.why}" for u in self.own)
            return one_line(
                f"no recording of {what} can be replayed: {ones}. Record it again with "
                f"{a.record} (`{a.listing}` shows the recordings)."
            )
        msg = f"no recording matches {what}"
        if self.nearest:
            best = self.nearest[0]
            diffs = ", ".join(
                f"{d.field} (recorded {d.recorded!r}, requested {d.requested!r})"
                for d in best.differences[:3]
            )
            msg += f"; nearest is {best.name}: {best.request}, which differs in {diffs}"
        elif self.kind is MissKind.UNREPLAYABLE:
            msg += (
                f"; the tape holds no recording that can be replayed ({self.count} without a "
                f"stored response, or not recorded whole: `{a.listing}` shows them)"
            )
        else:
            msg += "; the tape is empty"
        if advice:
            msg += (
                f". Record it with {a.record}, or leave volatile fields out of matching "
                f"with {a.ignore}."
            )
        return one_line(msg)

    # -- the typed JSON form -----------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "request": self.request,
            "advice": self.advice.as_dict(),
            "nearest": [c.as_dict() for c in self.nearest],
            "own": [u.as_dict() for u in self.own],
            "count": self.count,
            "detail": self.detail,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Miss:
        """The miss :meth:`to_json` gave (KeyError/TypeError/ValueError if it is not one)."""
        nearest = tuple(
            Candidate(
                int(c["id"]), str(c["name"]), str(c["request"]),
                tuple(Difference(str(d["field"]), d["recorded"], d["requested"])
                      for d in c["differences"]),
            )
            for c in doc.get("nearest", ())
        )  # fmt: skip
        own = tuple(
            Unreplayable(int(u["id"]), str(u["name"]), str(u["state"]), str(u["why"]))
            for u in doc.get("own", ())
        )
        return cls(
            MissKind(doc["kind"]),
            str(doc["request"]),
            Advice(**{k: str(v) for k, v in doc["advice"].items()}),
            nearest,
            own,
            int(doc.get("count", 0)),
            str(doc.get("detail", "")),
        )

    def body(self) -> bytes:
        """The JSON error a client gets, shaped like the APIs' own errors: ``message`` for
        people and SDKs, ``miss`` (the typed form) for programs."""
        doc = {
            "error": {
                "type": "ssetape_replay_miss",
                "code": "ssetape_replay_miss",
                "message": self.message,
                "nearest": [c.as_dict() for c in self.nearest],
                "miss": self.to_json(),
            }
        }
        return orjson.dumps(doc, option=orjson.OPT_INDENT_2)
