"""The counts of failures by fault in SQL say what vocabulary.counted_fault and is_failed say
in Python: a fault filter lists what `stats` counts, on SQLite (added up in Python) and on
PostgreSQL (added up by the server), rows stored before faults were included."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest

from ssetape.analysis.stats import Stats
from ssetape.storage.filters import ExchangeFilter
from ssetape.storage.models import Exchange
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from ssetape.vocabulary import Fault, counted_fault, fault_choices, faults_of, is_failed

# Every combination the counts must agree on: stored faults, none (stored before faults
# were), and what the transport and the outcome say.
_ROWS = [
    {"outcome": o, "state": st, "status": code, "fault": f}
    for o, st, code, f in itertools.product(
        [None, "completed", "error", "cut", "interrupted", "no_response", "aborted", "http_error"],
        ["completed", "interrupted", "failed", "truncated", "aborted"],
        [None, 200, 400, 503],
        [None, *Fault],
    )
]


def test_the_counts_in_sql_are_the_rule_in_python(
    store: Store, exchange_fields: Callable[..., dict[str, Any]]
) -> None:
    with store.Session.begin() as s:
        for n, row in enumerate(_ROWS):
            s.add(Exchange(uid=f"{n:032d}", **exchange_fields(model=f"m{n % 3}", **row)))
    queries = Queries(store)
    for choice in fault_choices():
        chosen = faults_of(choice)
        expected = {
            n
            for n, r in enumerate(_ROWS)
            if is_failed(r["outcome"], r["status"], r["state"])
            and counted_fault(r["fault"], r["state"]) in chosen
        }
        listed = queries.exchanges(ExchangeFilter(outcome="failed", fault=choice), limit=10**4)
        assert {int(x.uid) for x in listed} == expected, choice
        # `stats` counts exactly what the list lists, by the database's sums (PostgreSQL)
        # or its own (SQLite).
        [everything] = Stats(store).groups(None, ExchangeFilter(), choice)
        assert everything["failed"] == len(expected), choice
        by_model = Stats(store).groups("model", ExchangeFilter(), choice)
        assert sum(g["failed"] for g in by_model) == len(expected)
    [everything] = Stats(store).groups(None, ExchangeFilter())
    assert everything["failed_fault"] == "provider"
    assert sum(everything["faults"].values()) == len(
        [r for r in _ROWS if is_failed(r["outcome"], r["status"], r["state"])]
    )
    # A fault filter alone also lists what went right but whose end someone else caused.
    stored = {n for n, r in enumerate(_ROWS) if r["fault"] == "client"}
    listed = queries.exchanges(ExchangeFilter(fault="client"), limit=10**4)
    assert stored <= {int(x.uid) for x in listed}
    with pytest.raises(ValueError, match="not one of provider, client, network, ssetape, any"):
        ExchangeFilter(fault="recorder")
