"""`ssetape stats` on PostgreSQL is added up by the server (storage.stat_totals), on SQLite in
Python (analysis.stats): the same figures either way, to the last digit printed."""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable
from typing import Any

import pytest

from ssetape.analysis.stats import Stats, _doc
from ssetape.storage.filters import ExchangeFilter
from ssetape.storage.models import Exchange
from ssetape.storage.queries import GROUP_BY, Queries
from ssetape.storage.store import Store
from ssetape.vocabulary import Fault, fault_choices

OUTCOMES = [None, "completed", "truncated", "error_event", "refused", "no_response"]
STATES = ["completed", "completed", "reset", "upstream_error", "recording"]


@pytest.fixture
def filled(store: Store, exchange_fields: Callable[..., dict[str, Any]]) -> Store:
    rng = random.Random(7)
    t0 = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    with store.Session.begin() as s:
        for n in range(400):
            usage = rng.random() < 0.8
            s.add(
                Exchange(
                    uid=f"{n:032d}",
                    state=rng.choice(STATES),
                    outcome=rng.choice(OUTCOMES),
                    # None as well: a row stored before faults were, counted by its state.
                    fault=rng.choice([None, *Fault]),
                    status=rng.choice([None, 200, 200, 429, 500]),
                    ttfb_us=rng.choice([None, rng.randrange(1, 2_000_000)]),
                    ttft_us=rng.choice([None, rng.randrange(1, 5_000_000)]),
                    tokens_per_s=rng.choice([None, rng.uniform(1, 300)]),
                    input_tokens=rng.randrange(0, 10**6) if usage else None,
                    output_tokens=rng.randrange(0, 10**5) if usage else None,
                    cost_nusd=rng.choice([None, rng.randrange(0, 10**12)]),
                    session=rng.choice([None, "s-1", "s-2", "s-3"]),
                    duration_us=rng.randrange(0, 10**7),
                    **exchange_fields(
                        started_at=t0 + dt.timedelta(seconds=n),
                        # "-" is how stats names the exchanges without a model: one group.
                        model=rng.choice([None, "-", "gpt-4o", "claude-sonnet-4", "gemini-2.5"]),
                        host=rng.choice(["api.openai.com", "api.anthropic.com"]),
                        api=rng.choice(["chat_completions", "messages", None]),
                    ),
                )
            )
    return store


@pytest.mark.parametrize("by", [None, *GROUP_BY])
def test_the_database_adds_up_what_python_adds_up(filled: Store, by: str | None) -> None:
    queries = Queries(filled)
    for flt in (ExchangeFilter(), ExchangeFilter(model="gpt"), ExchangeFilter(model="none-such")):
        python = Stats._added_up(queries, by, flt)
        assert bool(python) == (flt.model != "none-such")
        if filled.is_sqlite:
            continue  # Python's is what stats shows
        server = {("all" if by is None else str(t.group) if t.group is not None else "-"): t
                  for t in queries.stat_totals(by, flt)}  # fmt: skip
        assert sorted(server) == sorted(python), flt
        for name, t in server.items():
            for fault in fault_choices():  # each selection of whose failures count
                assert _doc(name, t, fault) == _doc(name, python[name], fault), (by, name, fault)
            assert t.ttft_sum == python[name].ttft_sum
    shown = Stats(filled).groups(by, ExchangeFilter())
    assert sum(g["count"] for g in shown) == 400
    assert [g["count"] for g in shown] == sorted((g["count"] for g in shown), reverse=True)
    assert Stats(filled).groups(by, ExchangeFilter(model="none-such")) == []
