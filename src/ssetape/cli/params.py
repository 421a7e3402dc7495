"""The parameter types of the options that choose exchanges: an API, a time, a time span."""

from __future__ import annotations

import datetime as dt
from typing import Any

import click

__all__ = ["ApiChoice", "SpanParam", "TimeParam"]


class ApiChoice(click.Choice):  # type: ignore[type-arg]  # generic only in click >= 8.2 stubs
    """``--api``: the API names, read when first needed (to check a value, or for help).
    They import every API's rules, 30 ms that `ssetape list` without --api never needs."""

    def __init__(self) -> None:
        self._names: tuple[str, ...] | None = None
        super().__init__(())
        self._names = None  # click set its empty tuple: still to be read

    @property
    def choices(self) -> tuple[str, ...]:
        if self._names is None:
            from ssetape.analysis.apis import api_names

            self._names = tuple(api_names())
        return self._names

    @choices.setter
    def choices(self, value: tuple[str, ...]) -> None:
        self._names = value


class TimeParam(click.ParamType):  # type: ignore[type-arg]  # generic only in click >= 8.2 stubs
    """A time option: a duration ago (30m, 1h, 2d) or an ISO date/time (naive = UTC)."""

    name = "TIME"

    def __init__(self, option: str = "--since") -> None:
        self.option = option

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, dt.datetime):
            return value
        from ssetape.storage.filters import parse_since

        try:
            return parse_since(str(value), option=self.option)
        except ValueError as e:
            self.fail(str(e), param, ctx)


class SpanParam(click.ParamType):  # type: ignore[type-arg]  # generic only in click >= 8.2 stubs
    """A time span option (250ms, 2s, 1.5s, 2m), as microseconds."""

    name = "TIME"

    def __init__(self, option: str) -> None:
        self.option = option

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, int):
            return value
        from ssetape.storage.filters import parse_span

        try:
            return parse_span(str(value), option=self.option)
        except ValueError as e:
            self.fail(str(e), param, ctx)
