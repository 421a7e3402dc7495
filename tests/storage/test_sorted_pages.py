"""Slowest first: exchanges sorted by a timing (duration, TTFB, TTFT, longest gap, start) in
keyset pages that cover every exchange once, those without the value last; and the range
filters on those timings, on both backends."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from ssetape.storage.filters import ExchangeFilter, parse_span
from ssetape.storage.models import Exchange
from ssetape.storage.queries import Queries
from ssetape.storage.sorted_pages import SORTS, Sort
from ssetape.storage.store import Store

T0 = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)
# Per exchange, in the order stored: (duration, TTFB, TTFT, longest gap) in ms (None: the
# exchange has no such timing: still recording, or not a stream), and its start in seconds
# after T0. Ties on every key, so that the id decides between them.
TIMINGS: list[tuple[int | None, int | None, int | None, int | None, int]] = [
    (1000, 100, 300, 50, 0),
    (5000, 200, 2000, 900, 1),
    (None, None, None, None, 2),  # still recording
    (3000, 150, None, None, 3),  # not a stream
    (5000, 250, 2500, 1200, 4),
    (250, 90, 120, 20, 5),
    (None, 300, None, None, 6),
    (8000, 400, 3500, 3000, 7),
    (3000, 150, 1500, 400, 8),
    (1500, 120, 2000, 700, 8),
]
KEYS = ("duration", "ttfb", "ttft", "gap", "started")


def fill(store: Store) -> dict[int, dict[str, Any]]:
    """The exchanges of TIMINGS, stored as the recorder leaves them; their values by id."""
    values: dict[int, dict[str, Any]] = {}
    with store.Session.begin() as s:
        for n, (duration, ttfb, ttft, gap, start) in enumerate(TIMINGS):
            us = {k: None if v is None else v * 1000
                  for k, v in zip(KEYS, (duration, ttfb, ttft, gap), strict=False)}  # fmt: skip
            x = Exchange(
                uid=f"{n:032d}", started_at=T0 + dt.timedelta(seconds=start), method="POST",
                scheme="https", host="api.openai.com", port=443, path="/v1/chat/completions",
                http_version="HTTP/1.1", request_headers=[], fingerprint="ab" * 32,
                is_stream=ttft is not None, state="completed" if duration else "recording",
                duration_us=us["duration"], ttfb_us=us["ttfb"], ttft_us=us["ttft"],
                gap_max_us=us["gap"],
            )  # fmt: skip
            s.add(x)
            s.flush()
            values[x.id] = {**us, "started": x.started_at}
    return values


def expected(values: dict[int, dict[str, Any]], sort: str) -> list[int]:
    """The ids in ``sort``'s order as a user reads it: by value, ties by id, both the same
    way; those without the value after all the others."""
    key, descending = sort.lstrip("-"), sort.startswith("-")
    known = sorted(
        (i for i in values if values[i][key] is not None),
        key=lambda i: (values[i][key], i),
        reverse=descending,
    )
    unknown = sorted((i for i in values if values[i][key] is None), reverse=descending)
    return known + unknown


def pages(queries: Queries, sort: Sort, limit: int, **filters: Any) -> list[list[int]]:
    """Every page of a sorted list, each from the cursor of the last row of the one before."""
    found: list[list[int]] = []
    cursor = None
    while True:
        rows = queries.exchanges(ExchangeFilter(**filters), limit=limit, sort=sort, cursor=cursor)
        found.append([x.id for x in rows])
        if len(rows) < limit:
            return found
        cursor = sort.cursor(rows[-1])


def test_slowest_first_lists_every_exchange_once_those_without_a_duration_last(
    store: Store,
) -> None:
    values = fill(store)
    queries = Queries(store)
    by_duration = pages(queries, Sort.parse("-duration"), 3)
    ids = [i for page in by_duration for i in page]
    assert ids == expected(values, "-duration")
    durations = [values[i]["duration"] for i in ids]
    assert durations[:3] == [8_000_000, 5_000_000, 5_000_000]  # the slowest first
    assert durations[-2:] == [None, None]  # unknown: last, not first
    assert [len(p) for p in by_duration] == [3, 3, 3, 1]


@pytest.mark.parametrize("sort", SORTS)
@pytest.mark.parametrize("limit", [1, 4, 50])
def test_every_sort_pages_through_every_exchange_once(store: Store, sort: str, limit: int) -> None:
    values = fill(store)
    found = pages(Queries(store), Sort.parse(sort), limit)
    assert [i for page in found for i in page] == expected(values, sort)
    assert all(0 < len(p) <= limit for p in found[:-1])


def test_a_cursor_goes_on_from_its_row_when_the_row_has_changed_since(store: Store) -> None:
    values = fill(store)
    queries, sort = Queries(store), Sort.parse("-ttft")
    first = queries.exchanges(limit=2, sort=sort)
    # The second of the page finished again, slower (a reindex): the page after it still
    # starts where the first one ended.
    with store.Session.begin() as s:
        moved = s.get(Exchange, first[1].id)
        assert moved is not None
        moved.ttft_us = 10**9
    rest = queries.exchanges(limit=50, sort=sort, cursor=sort.cursor(first[1]))
    assert [x.id for x in first + rest] == expected(values, "-ttft")


def test_range_filters_select_exactly_the_exchanges_in_range(store: Store) -> None:
    values = fill(store)
    queries = Queries(store)

    def ids(**filters: Any) -> list[int]:
        return sorted(x.id for x in queries.exchanges(ExchangeFilter(**filters), limit=50))

    def within(key: str, low: int | None = None, high: int | None = None) -> list[int]:
        return sorted(
            i for i, v in values.items()
            if v[key] is not None and (low is None or v[key] >= low)
            and (high is None or v[key] <= high)
        )  # fmt: skip

    two_s, ms = parse_span("2s"), parse_span("250ms")
    assert ids(min_ttft=two_s) == within("ttft", two_s) and len(within("ttft", two_s)) == 4
    assert ids(max_ttft=two_s) == within("ttft", None, two_s)
    assert ids(min_duration=parse_span("1.5s"), max_duration=parse_span("5s")) == within(
        "duration", 1_500_000, 5_000_000
    )
    assert ids(max_duration=ms) == within("duration", None, 250_000) != []
    assert ids(min_ttfb=parse_span("0.2s")) == within("ttfb", 200_000)
    assert ids(min_gap=parse_span("1s"), max_gap=parse_span("3000ms")) == within(
        "gap", 1_000_000, 3_000_000
    )
    assert ids(min_ttft=parse_span("1m")) == []
    # With a sort, in its pages: the range first, then the order.
    sort = Sort.parse("-gap")
    found = [i for p in pages(queries, sort, 2, min_gap=parse_span("400ms")) for i in p]
    assert found == [i for i in expected(values, "-gap") if i in within("gap", 400_000)]


def test_an_unknown_sort_or_a_bad_time_is_one_line_naming_the_choices() -> None:
    with pytest.raises(ValueError) as bad:
        Sort.parse("slowest")
    [line] = str(bad.value).splitlines()
    assert "'slowest'" in line
    assert all(key in line for key in KEYS)
    for text in ("2", "2x", "-1s", "1e9m", "s"):
        with pytest.raises(ValueError, match=r"250ms, 2s, 1\.5s"):
            parse_span(text, option="--min-ttft")
    assert [parse_span(t) for t in ("250ms", "2s", "1.5s", ".5s", "800us")] == [
        250_000, 2_000_000, 1_500_000, 500_000, 800
    ]  # fmt: skip


def test_a_cursor_of_another_sort_is_refused(store: Store) -> None:
    fill(store)
    queries, by_duration = Queries(store), Sort.parse("-duration")
    [x] = queries.exchanges(limit=1, sort=by_duration)
    for sort, cursor in ((Sort.parse("-ttft"), by_duration.cursor(x)),
                         (by_duration, str(x.id)), (Sort(), by_duration.cursor(x)),
                         (by_duration, "-duration:abc:1")):  # fmt: skip
        with pytest.raises(ValueError, match="not one a page sorted by"):
            queries.exchanges(limit=1, sort=sort, cursor=cursor)
    with pytest.raises(ValueError, match="past what the store holds"):
        queries.exchanges(limit=1, sort=by_duration, cursor=f"-duration:1:{2**63}")
