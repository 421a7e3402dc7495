"""Which exchanges a reader works on: the filters shared by list, stats, export and the web
viewer (where they live in the page's URL)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, Select, and_, case, or_

from ssetape.storage.models import Exchange
from ssetape.vocabulary import (
    ERROR_OUTCOMES,
    FAILED,
    TRANSPORT_ERRORS,
    ExchangeState,
    Fault,
    faults_of,
    parse_outcome,
)

__all__ = [
    "RANGES",
    "ExchangeFilter",
    "Filters",
    "Picked",
    "counted_fault_column",
    "failed_clause",
    "fault_clause",
    "parse_since",
    "parse_span",
]

S = TypeVar("S", bound="Select[*tuple[Any, ...]]")

_AGO = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)\s*$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_SPAN = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(us|µs|ms|s|m)\s*$")
_SPAN_US = {"us": 1, "µs": 1, "ms": 1000, "s": 1_000_000, "m": 60_000_000}
# What a range filter may bound (ssetape list --min-ttft 2s): the timings, in microseconds.
RANGES = {
    "duration": Exchange.duration_us,
    "ttfb": Exchange.ttfb_us,
    "ttft": Exchange.ttft_us,
    "gap": Exchange.gap_max_us,
}


def parse_since(
    text: str, now: dt.datetime | None = None, *, option: str = "--since"
) -> dt.datetime:
    """``1h``/``30m``/``2d`` ago, or an ISO date/datetime (naive means UTC); ``option`` names
    it in the error."""
    now = now or dt.datetime.now(dt.UTC)
    m = _AGO.match(text)
    if m:
        try:
            return now - dt.timedelta(seconds=float(m.group(1)) * _UNIT_S[m.group(2)])
        except (OverflowError, ValueError):  # further back than datetime reaches
            raise ValueError(
                f"{option} {text!r}: too far back (datetimes start at year 1)"
            ) from None
    try:
        when = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"{option} {text!r}: use a duration like 30m, 1h, 2d or a date like 2026-11-01"
        ) from None
    return when if when.tzinfo else when.replace(tzinfo=dt.UTC)


def parse_span(text: str, *, option: str = "--min-duration") -> int:
    """A time span as microseconds: ``250ms``, ``2s``, ``1.5s``, ``2m``, ``800us``;
    ``option`` names it in the error."""
    m = _SPAN.match(text)
    # Past 2**63 µs (292,000 years) no column holds it: refused like any other bad value.
    us = round(float(m.group(1)) * _SPAN_US[m.group(2)]) if m else -1
    if not 0 <= us < 2**63:
        raise ValueError(f"{option} {text!r}: use a time like 250ms, 2s, 1.5s or 2m")
    return us


def failed_clause() -> ColumnElement[bool]:
    """``vocabulary.is_failed`` in SQL: the outcome when the exchange was analysed, else its
    transport alone. Every count of failed exchanges (stats, sessions, the web's charts)
    and the filter ``outcome=failed`` use this one expression."""
    x = Exchange
    return or_(
        and_(x.outcome.is_not(None), x.outcome.in_(sorted(ERROR_OUTCOMES))),
        and_(x.outcome.is_(None), or_(x.status >= 400, x.state.in_(sorted(TRANSPORT_ERRORS)))),
    )


def counted_fault_column() -> ColumnElement[str]:
    """``vocabulary.counted_fault`` in SQL: the fault a failed exchange counts under (its
    own; for one stored before faults were, ssetape's if interrupted, else the provider's)."""
    x = Exchange
    return case(
        (x.fault.is_not(None), x.fault),
        (x.state == ExchangeState.INTERRUPTED, Fault.SSETAPE.value),
        else_=Fault.PROVIDER.value,
    )


def fault_clause(faults: frozenset[str]) -> ColumnElement[bool]:
    """The exchanges whose fault is one of ``faults`` (``vocabulary.faults_of``): a failed
    one stored before faults were counts under ``counted_fault_column``, so that a fault
    filter lists what a count of that fault's failures counts."""
    x, chosen = Exchange, sorted(faults)
    return or_(
        x.fault.in_(chosen),
        and_(x.fault.is_(None), failed_clause(), counted_fault_column().in_(chosen)),
    )


@dataclasses.dataclass(frozen=True)
class ExchangeFilter:
    """The exchanges a reader asks for; every field left None matches all."""

    api: str | None = None
    model: str | None = None  # exact or prefix
    outcome: str | None = None
    # Who made it fail (vocabulary.Fault), or "any": the exchanges it failed (or, the
    # client, went away from).
    fault: str | None = None
    host: str | None = None
    since: dt.datetime | None = None
    text: str | None = None  # in the output text, the path or the request's text
    session: str | None = None  # exact
    # Ranges of the timings (RANGES), in microseconds, both ends included: an exchange
    # without the timing (no TTFT: not a stream, or no content yet) is in no range of it.
    min_duration: int | None = None
    max_duration: int | None = None
    min_ttfb: int | None = None
    max_ttfb: int | None = None
    min_ttft: int | None = None
    max_ttft: int | None = None
    min_gap: int | None = None
    max_gap: int | None = None

    def __post_init__(self) -> None:
        # An outcome no exchange can have would match nothing, silently: refuse it, naming
        # the choices (ValueError, which every front end shows as its one-line error).
        if self.outcome:
            parse_outcome(self.outcome)
        if self.fault:
            faults_of(self.fault)

    def apply(self, stmt: S) -> S:
        if self.api:
            stmt = stmt.where(Exchange.api == self.api)
        if self.model:
            # Exact or prefix: "gpt-4o" should find "gpt-4o-2024-08-06" too.
            stmt = stmt.where(
                or_(
                    Exchange.model == self.model,
                    Exchange.model.startswith(self.model, autoescape=True),
                )
            )
        if self.outcome == FAILED:
            stmt = stmt.where(failed_clause())
        elif self.outcome:
            stmt = stmt.where(Exchange.outcome == self.outcome)
        if self.fault:
            stmt = stmt.where(fault_clause(faults_of(self.fault)))
        if self.host:
            # Hosts are stored as the proxy saw them: lower case.
            stmt = stmt.where(Exchange.host == self.host.lower())
        if self.since:
            stmt = stmt.where(Exchange.started_at >= self.since)
        if self.text:
            stmt = stmt.where(
                or_(
                    Exchange.output_text.contains(self.text, autoescape=True),
                    Exchange.path.contains(self.text, autoescape=True),
                    Exchange.request_text.contains(self.text, autoescape=True),
                )
            )
        if self.session:
            stmt = stmt.where(Exchange.session == self.session)
        for name, column in RANGES.items():
            low, high = getattr(self, f"min_{name}"), getattr(self, f"max_{name}")
            if low is not None:
                stmt = stmt.where(column >= low)
            if high is not None:
                stmt = stmt.where(column <= high)
        return stmt

    @classmethod
    def pop(cls, kwargs: dict[str, Any]) -> ExchangeFilter:
        """Take the filter options out of a command's keyword arguments (see
        ``cli.options.filter_options``); those a command does not take stay None."""
        return cls(
            **{field.name: kwargs.pop(field.name, None) for field in dataclasses.fields(cls)}
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Picked:
    """What `ssetape export` picks besides the list's filters; every field left empty
    matches all. ``ids`` as `ssetape show` reads them: 32 characters is a uid, other digits
    an id."""

    ids: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()
    path: str | None = None  # a prefix
    states: tuple[str, ...] = ()
    until: dt.datetime | None = None  # started before

    def apply(self, stmt: S) -> S:
        if self.ids:
            uids = [i for i in self.ids if len(i) == 32 or not i.isdigit()]
            nums = [int(i) for i in self.ids if i not in uids]
            stmt = stmt.where(or_(Exchange.id.in_(nums), Exchange.uid.in_(uids)))
        if self.hosts:
            # Hosts are stored as the proxy saw them: lower case.
            stmt = stmt.where(Exchange.host.in_([h.lower() for h in self.hosts]))
        if self.path:
            stmt = stmt.where(Exchange.path.startswith(self.path, autoescape=True))
        if self.states:
            stmt = stmt.where(Exchange.state.in_(self.states))
        if self.until is not None:
            stmt = stmt.where(Exchange.started_at < self.until)
        return stmt


# The name the commands used first.
Filters = ExchangeFilter
