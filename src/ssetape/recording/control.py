"""Control requests to a recording proxy that several tests share (the pytest plugin's).

A recording proxy started with ``ssetape_control=TOKEN`` answers a request that carries the
``x-ssetape-control: TOKEN`` header itself: it is never forwarded upstream nor recorded, and
without the token (or with the option empty, its default) the header means nothing. The
request's body is one :class:`ControlRequest` as JSON, the answer one :class:`ControlAnswer`.
Both sides import this module; nothing else knows the fields.

The plugin starts one recording proxy per upstream per test process and reuses it for every
test that records, instead of starting one per test (3-4 s each): before a test it names the
test's session, after it asks the proxy to *settle*, so that everything the test sent is in
the store before its cassette is written.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

__all__ = ["Command", "ControlAnswer", "ControlError", "ControlRequest"]

MAX_SETTLE = 60.0  # seconds a settle may wait, whatever the request asks


class ControlError(ValueError):
    """A control request or answer that is not one: the message is one line."""


class Command(StrEnum):
    # The exchanges that begin after this belong to the request's ``session`` ("": none).
    SESSION = "session"
    # Answer once every exchange begun before has ended and its end is committed to the
    # store, or after ``timeout`` seconds (then ``settled`` is false).
    SETTLE = "settle"


@dataclass(frozen=True, slots=True)
class ControlRequest:
    command: Command
    session: str = ""
    timeout: float = 10.0

    def to_json(self) -> bytes:
        return orjson.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, raw: bytes) -> ControlRequest:
        obj = _object(raw, "request")
        try:
            command = Command(str(obj.get("command")))
        except ValueError:
            raise ControlError(f"unknown command {str(obj.get('command'))[:40]!r}") from None
        session, timeout = obj.get("session", ""), obj.get("timeout", 10.0)
        if not isinstance(session, str):
            raise ControlError("session: not a string")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout >= 0:
            raise ControlError("timeout: not a number of seconds")
        return cls(command, session, min(float(timeout), MAX_SETTLE))


@dataclass(frozen=True, slots=True)
class ControlAnswer:
    """What the proxy answers; the counts are its totals since it started, so the plugin
    tells what one test lost by the difference with the previous answer."""

    settled: bool = True
    in_flight: int = 0  # exchanges still open when the answer was given
    exchanges_recorded: int = 0
    events_recorded: int = 0
    exchanges_lost: int = 0  # by the proxy and by its recording processes
    events_lost: int = 0
    store_errors: int = 0
    last_error: str | None = None
    error: str = ""  # the request was refused: why

    def to_json(self) -> bytes:
        return orjson.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, raw: bytes) -> ControlAnswer:
        obj = _object(raw, "answer")
        known = {f.name for f in dataclasses.fields(cls)}
        try:
            return cls(**{k: v for k, v in obj.items() if k in known})
        except TypeError as e:
            raise ControlError(f"bad answer: {e}") from None

    def lost_since(self, before: ControlAnswer) -> str:
        """What was lost between ``before`` and this answer, as a phrase ("" if nothing)."""
        parts = []
        for name, word in (
            ("exchanges_lost", "exchange(s) lost"),
            ("events_lost", "event(s) lost"),
            ("store_errors", "failed store write(s)"),
        ):
            more = getattr(self, name) - getattr(before, name)
            if more > 0:
                parts.append(f"{more} {word}")
        if parts and self.last_error:
            parts.append(f"last error: {self.last_error}")
        return ", ".join(parts)


def _object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise ControlError(f"not a control {what}: {raw[:60]!r}") from None
    if not isinstance(obj, dict):
        raise ControlError(f"not a control {what}: {raw[:60]!r}")
    return obj
