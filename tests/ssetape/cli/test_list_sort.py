"""`ssetape list --sort -duration`: slowest first, page after page by the cursor each page
prints, those without a duration last; `--min-ttft 2s` and the other ranges; a wrong sort,
time or cursor is one line naming what it takes."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from ssetape.cli.main import main
from ssetape.storage.store import Store
from tests.addons.stores import pg_schema
from tests.ssetape.cli.test_cli import assert_one_line_error
from tests.storage.test_sorted_pages import KEYS, expected, fill

NEXT = "next page: --cursor "


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, dict[int, Any]]]:
    """A store of the exchanges of known timings, and their values by id."""

    def filled(url: str) -> tuple[str, dict[int, Any]]:
        store = Store.open(url)
        try:
            return url, fill(store)
        finally:
            store.close()

    if request.param == "sqlite":
        yield filled(str(tmp_path / "store.db"))
        return
    with pg_schema() as url:
        yield filled(url)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    r = CliRunner().invoke(main, list(args), catch_exceptions=False, terminal_width=200)
    return subprocess.CompletedProcess(list(args), r.exit_code, r.stdout, r.stderr)


def listed(url: str, *args: str) -> list[list[int]]:
    """The ids of each page `ssetape list --json` prints, following the cursor it prints."""
    found: list[list[int]] = []
    more: list[str] = []
    while True:
        r = cli("list", "--db", url, "--json", *args, *more)
        assert r.returncode == 0, r.stderr
        found.append([x["id"] for x in orjson.loads(r.stdout)])
        cursors = [line[len(NEXT) :] for line in r.stderr.splitlines() if line.startswith(NEXT)]
        if not cursors:
            return found
        more = ["--cursor", cursors[0]]


def test_sort_by_duration_lists_the_slowest_first_a_page_at_a_time(
    db: tuple[str, dict[int, Any]],
) -> None:
    url, values = db
    found = listed(url, "--sort", "-duration", "--limit", "3")
    ids = [i for page in found for i in page]
    assert ids == expected(values, "-duration")  # each once, those without a duration last
    assert [values[i]["duration"] for i in ids[:3]] == [8_000_000, 5_000_000, 5_000_000]
    assert [len(p) for p in found] == [3, 3, 3, 1]
    # Every key, either way; the default is newest first, as ever.
    for key in KEYS:
        for sort in (f"-{key}", key):
            assert [i for p in listed(url, "--sort", sort, "--limit", "4") for i in p] == (
                expected(values, sort)
            ), sort
    assert [i for p in listed(url, "--limit", "4") for i in p] == expected(values, "-started")


def test_the_table_says_where_the_next_page_starts(db: tuple[str, dict[int, Any]]) -> None:
    url, values = db
    r = cli("list", "--db", url, "--sort", "-ttft", "--limit", "2")
    assert r.returncode == 0, r.stderr
    [line] = [ln for ln in r.stdout.splitlines() if ln.startswith(NEXT)]
    cursor = line[len(NEXT) :]
    rest = listed(url, "--sort", "-ttft", "--limit", "50", "--cursor", cursor)
    assert rest == [expected(values, "-ttft")[2:]]


def test_range_filters_pick_exactly_those_in_range(db: tuple[str, dict[int, Any]]) -> None:
    url, values = db

    def ids(*args: str) -> list[int]:
        return sorted(i for p in listed(url, "--limit", "50", *args) for i in p)

    def within(key: str, low: float = 0, high: float = float("inf")) -> list[int]:
        return sorted(i for i, v in values.items() if v[key] is not None and low <= v[key] <= high)

    assert ids("--min-ttft", "2s") == within("ttft", 2e6) != []
    assert ids("--max-ttft", "1.5s") == within("ttft", high=1.5e6) != []
    assert ids("--min-duration", "1.5s", "--max-duration", "5000ms") == within(
        "duration", 1.5e6, 5e6
    )
    assert ids("--min-ttfb", "250ms") == within("ttfb", 2.5e5) != []
    assert ids("--min-gap", "1s") == within("gap", 1e6) != []
    pages = listed(url, "--sort", "-ttft", "--min-ttft", "2s", "--limit", "2")
    slow = [i for p in pages for i in p]
    assert slow == [i for i in expected(values, "-ttft") if i in within("ttft", 2e6)]


def test_an_unknown_sort_is_one_line_listing_the_valid_ones(
    db: tuple[str, dict[int, Any]],
) -> None:
    url, _ = db
    r = cli("list", "--db", url, "--sort", "slowest")
    assert_one_line_error(r, "--sort", "'slowest'", *KEYS)
    assert_one_line_error(cli("list", "--db", url, "--min-ttft", "2"), "--min-ttft", "250ms, 2s")
    r = cli("list", "--db", url, "--sort", "-ttft", "--cursor", "12")
    assert_one_line_error(r, "--cursor", "sorted by -ttft")
