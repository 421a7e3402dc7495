"""Which exchanges a command works on: the filter options shared by list, stats and export."""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Callable
from typing import Any, TypeVar

import click
from sqlalchemy import Select, or_

from ssetape.storage.models import Exchange

F = TypeVar("F", bound=Callable[..., Any])
S = TypeVar("S", bound="Select[*tuple[Any, ...]]")

_AGO = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)\s*$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
APIS = ("chat_completions", "responses", "messages", "images", "unknown")


def parse_since(text: str, now: dt.datetime | None = None) -> dt.datetime:
    """``1h``/``30m``/``2d`` ago, or an ISO date/datetime (naive means UTC)."""
    now = now or dt.datetime.now(dt.UTC)
    m = _AGO.match(text)
    if m:
        return now - dt.timedelta(seconds=float(m.group(1)) * _UNIT_S[m.group(2)])
    try:
        when = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"--since {text!r}: use a duration like 30m, 1h, 2d or a date like 2026-11-01"
        ) from None
    return when if when.tzinfo else when.replace(tzinfo=dt.UTC)


class TimeParam(click.ParamType):  # type: ignore[type-arg]  # generic only in click >= 8.2 stubs
    """A time option: a duration ago (30m, 1h, 2d) or an ISO date/time (naive = UTC)."""

    name = "TIME"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, dt.datetime):
            return value
        try:
            return parse_since(str(value))
        except ValueError as e:
            self.fail(str(e), param, ctx)


@dataclasses.dataclass(frozen=True)
class Filters:
    api: str | None = None
    model: str | None = None
    outcome: str | None = None
    since: dt.datetime | None = None
    grep: str | None = None

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
        if self.outcome:
            stmt = stmt.where(Exchange.outcome == self.outcome)
        if self.since:
            stmt = stmt.where(Exchange.started_at >= self.since)
        if self.grep:
            stmt = stmt.where(
                or_(
                    Exchange.output_text.contains(self.grep, autoescape=True),
                    Exchange.path.contains(self.grep, autoescape=True),
                )
            )
        return stmt

    @classmethod
    def options(cls, f: F) -> F:
        """Click options for every field, passed to the command as ``filters``."""

        decorators = [
            click.option("--api", type=click.Choice(APIS), help="Only this API kind."),
            click.option("--model", help="Only this model (exact or prefix)."),
            click.option("--outcome", help="Only this outcome (completed, error, refused, ...)."),
            click.option(
                "--since", type=TimeParam(), help="Only since a time: 30m, 1h, 2d or 2026-11-01."
            ),
            click.option(
                "--grep", metavar="TEXT", help="Only where the output text or path has TEXT."
            ),
        ]
        for d in reversed(decorators):
            f = d(f)
        return f

    @classmethod
    def pop(cls, kwargs: dict[str, Any]) -> Filters:
        """Take the filter options out of a command's keyword arguments."""
        return cls(
            **{field.name: kwargs.pop(field.name, None) for field in dataclasses.fields(cls)}
        )
