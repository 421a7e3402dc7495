"""Faults a replay serves on purpose: a real outage, at a chosen point of a real recording.

Sans-IO: this module parses and checks faults (``ssetape replay --fault SPEC``, the pytest
marker's ``faults=[...]``, ``ssetape.fault(...)``), keeps count of the requests they still
apply to, and turns a recording's timed rows into the pieces to play. The player
(:mod:`ssetape.replay.player`) and the replay fronts only ask it; the provider's own error
shapes are in :mod:`ssetape.replay.provider_errors`.

Specs, one fault each::

    cut:event=5          the connection drops after the first 5 recorded events
    cut:ms=300           ... 300 ms after the request was in
    stall:event=5,ms=2000  2 s of silence after the first 5 events, then the rest
    error:event=5        the provider's mid-stream error replaces what follows event 5
    status:429,retry_after=1,times=1  the first request(s) get 429 with retry-after

Events are the recording's stored events (wire chunks for an encoded stream), counted from
the first. Times are wall-clock: at ``--speed 0`` a stall still stalls and a cut still waits.
``times=K``: the fault serves the first K requests (status: 1 unless said), then the recording
plays as usual; stream faults apply to every streamed recording unless limited so. A WebSocket
session takes them as a stream does, counted in its server frames
(:mod:`ssetape.replay.ws_faults` says what each kind does there).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum

from ssetape.analysis.apis import detect_api
from ssetape.replay.playback import Row, timed_pieces
from ssetape.replay.provider_errors import errors_for, reason
from ssetape.replay.response_parts import END, Body, Head, Part
from ssetape.vocabulary import Header

__all__ = ["Fault", "FaultError", "FaultKind", "Faults", "Plan", "plan"]


class FaultKind(StrEnum):
    CUT = "cut"
    STALL = "stall"
    ERROR = "error"
    STATUS = "status"


class FaultError(ValueError):
    """A fault that cannot be: the message is one line that says why."""


_KEYS = {"event": "after_event", "after_event": "after_event", "ms": "ms", "times": "times",
         "retry_after": "retry_after", "retry-after": "retry_after",
         "status": "status"}  # fmt: skip
# What each kind takes (name: required?); anything else is a mistake worth a message.
_TAKES: dict[FaultKind, dict[str, bool]] = {
    FaultKind.CUT: {"after_event": False, "ms": False, "times": False},
    FaultKind.STALL: {"after_event": True, "ms": True, "times": False},
    FaultKind.ERROR: {"after_event": True, "times": False},
    FaultKind.STATUS: {"status": True, "retry_after": False, "times": False},
}
EXAMPLES = "cut:event=5, cut:ms=300, stall:event=5,ms=2000, error:event=5, status:429,retry_after=1"


@dataclass(frozen=True, slots=True)
class Fault:
    kind: FaultKind
    after_event: int | None = None  # the recorded events played before the fault
    ms: int | None = None  # cut: when (after the request was in); stall: how long
    status: int | None = None
    retry_after: float | None = None  # seconds, sent as the retry-after header
    times: int | None = None  # requests it serves; None: all (status: 1)

    @classmethod
    def make(cls, kind: str | FaultKind, **options: object) -> Fault:
        """A checked fault (FaultError says what is wrong), e.g. ``make("cut", after_event=5)``."""
        try:
            k = FaultKind(kind)
        except ValueError:
            names = ", ".join(f.value for f in FaultKind)
            raise FaultError(f"fault {kind!r}: no such kind (kinds: {names})") from None
        takes = _TAKES[k]
        wrong = sorted(set(options) - set(takes))
        if wrong:
            raise FaultError(f"fault {k.value}: takes no {', '.join(wrong)} "
                             f"(it takes {', '.join(takes)})")  # fmt: skip
        given = {key: v for key, v in options.items() if v is not None}
        missing = [key for key, required in takes.items() if required and key not in given]
        if missing:
            raise FaultError(f"fault {k.value}: needs {', '.join(missing)}")
        values = {key: _number(k, key, v) for key, v in given.items()}
        if k == FaultKind.CUT and ("after_event" in values) == ("ms" in values):
            raise FaultError("fault cut: give either event=N or ms=T")
        status = values.get("status")
        if status is not None and not 400 <= status <= 599:
            raise FaultError(f"fault status: {status} is not an HTTP error status (400-599)")
        times = values.get("times")
        if times is not None and times < 1:
            raise FaultError("fault: times must be 1 or more")
        return cls(
            k,
            after_event=_int(values.get("after_event")),
            ms=_int(values.get("ms")),
            status=_int(status),
            # To the ms, as the header says it (``1e-07`` is no number an SDK reads).
            retry_after=_ms(values.get("retry_after")),
            times=_int(times) if times is not None else (1 if k == FaultKind.STATUS else None),
        )

    @classmethod
    def parse(cls, spec: str) -> Fault:
        """A fault from its spec (``cut:event=5``; see the module's docstring)."""
        kind, _, rest = spec.strip().partition(":")
        options: dict[str, object] = {}
        for i, item in enumerate(p.strip() for p in rest.split(",") if p.strip()):
            key, eq, value = item.partition("=")
            if not eq and i == 0 and kind.strip() == FaultKind.STATUS.value:
                key, value = "status", item  # status:429
            elif not eq:
                raise FaultError(
                    f"fault {spec[:80]!r}: {item[:40]!r} is not key=value (e.g. {EXAMPLES})"
                )
            name = _KEYS.get(key.strip())
            if name is None:
                raise FaultError(f"fault {spec[:80]!r}: unknown key {key.strip()[:40]!r}")
            options[name] = value.strip()
        try:
            return cls.make(kind.strip(), **options)
        except FaultError as e:
            raise FaultError(f"fault {spec[:80]!r}: {str(e).partition(': ')[2]}") from None

    @property
    def streams(self) -> bool:
        """Whether it changes a stream (else it answers in place of one)."""
        return self.kind != FaultKind.STATUS

    def spec(self) -> str:
        parts = [f"{self.status}"] if self.status is not None else []
        for key in ("after_event", "ms", "retry_after", "times"):
            value = getattr(self, key)
            if value is not None:
                parts.append(f"{'event' if key == 'after_event' else key}={_shown(value)}")
        return f"{self.kind.value}:{','.join(parts)}"


# The most any number of a fault may be: 24 days of ms or s, 2**31 - 1 events or requests
# (an event's seq is a 32-bit column). Past it (`ms=inf`, `event=1e400`) it is an error, never
# an OverflowError or a header `retry-after: inf`.
MAX_NUMBER = 2**31 - 1


def _number(kind: FaultKind, key: str, value: object) -> float:
    try:
        number = float(value) if isinstance(value, str | int | float) else float("nan")
    except (ValueError, OverflowError):  # float() of an int of 400 digits
        number = float("nan")
    # Not `number != int(number)`: int(inf) raises OverflowError.
    if not 0 <= number <= MAX_NUMBER or (key != "retry_after" and not number.is_integer()):
        what = "a number of seconds" if key == "retry_after" else "a whole number"
        raise FaultError(
            f"fault {kind.value}: {key} {str(value)[:40]!r} is not {what} from 0 to {MAX_NUMBER}"
        )
    return number


def _shown(value: float) -> str:
    """A number as a spec or header says it: ``2000``, ``1.5``, never ``2e+06`` or ``inf``."""
    return str(int(value)) if float(value).is_integer() else f"{value:.3f}".rstrip("0")


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 3)


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)


class Faults:
    """The faults of one replay, and how many more requests each may serve (shared by the
    servers of a replay; added to while it runs by a test's ``ssetape.fault(...)``)."""

    def __init__(self, faults: Iterable[Fault | str] = ()) -> None:
        self._lock = threading.Lock()
        self._faults: list[Fault] = []
        self._left: list[int | None] = []
        for fault in faults:
            self.add(fault)

    def add(self, fault: Fault | str) -> Fault:
        f = Fault.parse(fault) if isinstance(fault, str) else fault
        with self._lock:
            self._faults.append(f)
            self._left.append(f.times)
        return f

    def __bool__(self) -> bool:
        return bool(self._faults)

    def __iter__(self) -> Iterator[Fault]:
        return iter(list(self._faults))

    def _take(self, streams: bool) -> list[Fault]:
        with self._lock:
            taken = []
            for i, f in enumerate(self._faults):
                left = self._left[i]
                if f.streams == streams and (left is None or left > 0):
                    if left is not None:
                        self._left[i] = left - 1
                    taken.append(f)
                    if not streams:
                        break  # one answer per request
            return taken

    def refusal(self, path: str) -> tuple[Part, ...] | None:
        """The whole answer of the next status fault that still serves (counted), in the
        shape of the API ``path`` calls; None: serve the request."""
        taken = self._take(streams=False)
        if not taken:
            return None
        f = taken[0]
        assert f.status is not None
        body = json.dumps(errors_for(detect_api(path)).status_body(f.status)).encode()
        fields = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body)),
                  (Header.FAULT.raw, f.spec().encode())]  # fmt: skip
        if f.retry_after is not None:
            fields.append((b"retry-after", _shown(f.retry_after).encode()))
        return Head(f.status, reason(f.status).encode(), tuple(fields)), Body(0.0, body), END

    def for_stream(self) -> list[Fault]:
        """The stream faults that apply to the next streamed recording (counted)."""
        return self._take(streams=True) if self._faults else []


@dataclass(frozen=True, slots=True)
class Plan:
    """A faulted stream in wall-clock seconds from offset zero: play it at speed 1."""

    ttfb: float
    pieces: tuple[Body, ...]
    complete: bool  # False: the connection drops after the last piece


def plan(
    faults: Sequence[Fault],
    ttfb_us: float,
    rows: Sequence[Row],
    *,
    speed: float,
    complete: bool,
    api: str | None,
    wire: bool,
) -> Plan:
    """The recording's rows (``(seq, offset µs, bytes)``, in order) with ``faults`` applied,
    in order: the recorded bytes before a fault unchanged, on their recorded time (scaled by
    ``speed``; 0: at once). An error in an encoded stream (``wire``) cannot be spliced into
    its compressed bytes: it cuts there instead."""

    def clock(us: float) -> float:
        return us / 1e6 / speed if speed > 0 else 0.0

    ttfb = clock(ttfb_us)
    timed = [(clock(off), data) for _, off, data in rows]
    cut_at: float | None = None
    for f in faults:
        n = f.after_event if f.after_event is not None else len(timed)
        if f.kind == FaultKind.STALL:
            hold = (f.ms or 0) / 1000
            timed = timed[:n] + [(t + hold, data) for t, data in timed[n:]]
            continue
        if f.kind == FaultKind.CUT and f.ms is not None:
            cut_at = max(f.ms / 1000, ttfb)
            timed = [(t, data) for t, data in timed if t <= cut_at]
        elif f.kind == FaultKind.CUT or wire:
            timed = timed[:n]
        else:  # error: at the moment the next event would have come
            at = timed[n][0] if n < len(timed) else (timed[-1][0] if timed else ttfb)
            timed = timed[:n]
            timed.append((at, errors_for(api).mid_stream([data for _, data in timed])))
            complete = True
            break
        complete = False
        break
    us = [(i, round(t * 1e6), data) for i, (t, data) in enumerate(timed)]
    pieces = list(timed_pieces(us))
    if cut_at is not None:
        pieces.append(Body(cut_at, b""))  # nothing more to write: the drop itself, on time
    return Plan(ttfb, tuple(pieces), complete)
