"""The viewer's list sorted by a column's header (duration, TTFB, TTFT, longest gap, time):
the same order and the same pages as `ssetape list --sort`, the next page's link keeping the
order and the filters, the sorted header marked and turning the order round, the timing
ranges of `ssetape list`, and a sort or cursor it cannot read refused with a 400."""

from __future__ import annotations

import datetime as dt
import html
import re
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from ssetape.storage.models import Exchange
from ssetape.storage.store import Store
from ssetape.web.list_page import PAGE_SIZE
from tests.addons.stores import pg_schema
from tests.ssetape.cli.test_list_sort import listed
from tests.ssetape.web.conftest import app_client
from tests.storage.test_sorted_pages import KEYS, T0, TIMINGS, expected

ROW_ID = re.compile(r'<tr data-id="(\d+)"')
NEXT = re.compile(r'<a href="([^"]+)" rel="next"')
# Past two pages of the list, with ties on every timing across the pages' ends, and
# exchanges without a TTFT (not streams) or without any timing (still recording).
COUNT = 13 * len(TIMINGS)


def fill(store: Store) -> dict[int, dict[str, Any]]:
    """TIMINGS over and over, as the recorder leaves them; their values by id."""
    values: dict[int, dict[str, Any]] = {}
    with store.Session.begin() as s:
        for n in range(COUNT):
            *timings, _ = TIMINGS[n % len(TIMINGS)]
            us = {k: None if v is None else v * 1000 for k, v in zip(KEYS, timings, strict=False)}
            x = Exchange(
                uid=f"{n:032d}", started_at=T0 + dt.timedelta(seconds=n), method="POST",
                scheme="https", host="api.openai.com", port=443, path="/v1/chat/completions",
                http_version="HTTP/1.1", request_headers=[], fingerprint="ab" * 32,
                is_stream=us["ttft"] is not None,
                state="completed" if us["duration"] else "recording",
                duration_us=us["duration"], ttfb_us=us["ttfb"], ttft_us=us["ttft"],
                gap_max_us=us["gap"], model="gpt-4o-mini" if n % 4 else "o3",
            )  # fmt: skip
            s.add(x)
            s.flush()
            values[x.id] = {**us, "started": x.started_at, "model": x.model}
    return values


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def sorted_store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, dict[int, Any], TestClient]]:
    """A store of exchanges of known timings, their values by id, and its viewer."""

    def viewed(url: str) -> Iterator[tuple[str, dict[int, Any], TestClient]]:
        with Store.open(url) as store:
            values = fill(store)
        for client in app_client(url):
            yield url, values, client

    if request.param == "sqlite":
        yield from viewed(str(tmp_path_factory.mktemp("sorted") / "store.db"))
        return
    with pg_schema() as url:
        yield from viewed(url)


def pages(client: TestClient, url: str) -> list[list[int]]:
    """The ids of each page of the list from ``url`` on, following its next page's link."""
    found: list[list[int]] = []
    while True:
        r = client.get(url)
        assert r.status_code == 200, r.text
        found.append([int(i) for i in ROW_ID.findall(r.text)])
        more = NEXT.search(r.text)
        if more is None:
            return found
        url = html.unescape(more.group(1))
        assert len(found) < 10, url


@pytest.mark.parametrize(
    ("query", "cli"),
    [
        ("sort=-duration", ["--sort", "-duration"]),
        ("sort=ttft", ["--sort", "ttft"]),
        ("sort=-gap", ["--sort", "-gap"]),
        ("sort=ttfb&model=gpt-4o-mini", ["--sort", "ttfb", "--model", "gpt-4o-mini"]),
        ("sort=-ttft&min_duration=1.5s", ["--sort", "-ttft", "--min-duration", "1.5s"]),
        ("", []),
    ],
)
def test_a_sorted_list_pages_in_the_order_and_pages_of_ssetape_list_sort(
    sorted_store: tuple[str, dict[int, Any], TestClient], query: str, cli: list[str]
) -> None:
    url, values, client = sorted_store
    found = pages(client, f"/?{query}")
    # The same ids on the same pages as the command line's, cursor after cursor.
    assert found == listed(url, *cli, "--limit", str(PAGE_SIZE))
    ids = [i for page in found for i in page]
    assert len(ids) == len(set(ids)) and all(len(p) == PAGE_SIZE for p in found[:-1])
    sort = dict(p.split("=") for p in query.split("&") if p).get("sort", "-started")
    if query.startswith(("sort=ttfb&", "sort=-ttft&")):
        assert set(ids) < set(values) and len(found) == 2  # narrowed, and still two pages
    else:
        assert ids == expected(values, sort) and len(found) == 3


def test_slowest_first_and_fastest_ttft_first_with_the_unknown_last(
    sorted_store: tuple[str, dict[int, Any], TestClient],
) -> None:
    _, values, client = sorted_store
    [slow, *_] = pages(client, "/?sort=-duration")
    durations = [values[i]["duration"] for i in slow]
    assert durations[:13] == [8_000_000] * 13 and durations == sorted(durations, reverse=True)
    ttfts = [values[i]["ttft"] for page in pages(client, "/?sort=ttft") for i in page]
    # Fastest first, and those without a TTFT (not streams, or recording: 39 of 130) last.
    unknown = sum(v["ttft"] is None for v in values.values())
    known = ttfts[:-unknown]
    assert ttfts[-unknown:] == [None] * unknown == [None] * 39
    assert None not in known and known == sorted(known)
    assert known[:13] == [120_000] * 13
    # The longest gap is a column of its own, shown as the other timings.
    row = re.search(r'<tr data-id="(\d+)".*?</tr>', client.get("/?sort=-gap").text, re.S)
    assert row is not None and values[int(row.group(1))]["gap"] == 3_000_000
    assert "<td>3.00 s</td>" in row.group(0), row.group(0)


def _header(text: str, key: str) -> tuple[str, str | None]:
    """The link of a column's header, and its aria-sort (None: not the sorted column)."""
    m = re.search(rf'<th([^>]*)><a href="([^"]+)" id="sort-{key}"', text)
    assert m is not None, key
    sort = re.search(r'aria-sort="(\w+)"', m.group(1))
    return html.unescape(m.group(2)), sort.group(1) if sort else None


def test_the_sorted_columns_header_is_marked_and_a_click_on_it_turns_the_order_round(
    sorted_store: tuple[str, dict[int, Any], TestClient],
) -> None:
    _, _, client = sorted_store
    newest = client.get("/?model=gpt-4o").text
    # Newest first: the time's header is the sorted one; a timing's sorts it, slowest first.
    assert _header(newest, "started") == ("/?model=gpt-4o&sort=started", "descending")
    assert _header(newest, "duration") == ("/?model=gpt-4o&sort=-duration", None)
    assert _header(newest, "gap") == ("/?model=gpt-4o&sort=-gap", None)
    slowest = client.get("/?model=gpt-4o&sort=-duration").text
    assert _header(slowest, "duration") == ("/?model=gpt-4o&sort=duration", "descending")
    assert _header(slowest, "ttft") == ("/?model=gpt-4o&sort=-ttft", None)
    assert _header(slowest, "started") == ("/?model=gpt-4o", None)  # back to newest first
    assert slowest.count("aria-sort=") == 1
    fastest = client.get("/?model=gpt-4o&sort=duration").text
    assert _header(fastest, "duration") == ("/?model=gpt-4o&sort=-duration", "ascending")
    # A sorted list is not followed live (a new exchange's place is not at its top), and the
    # filter form keeps the order.
    assert "data-live=" in newest and "data-live=" not in slowest
    assert '<input type="hidden" name="sort" value="duration">' in fastest


def test_a_sort_or_cursor_the_list_cannot_read_is_a_400_naming_the_choices(
    sorted_store: tuple[str, dict[int, Any], TestClient],
) -> None:
    _, _, client = sorted_store
    r = client.get("/", params={"sort": "slowest"})
    assert r.status_code == 400
    m = re.search(r'<p class="error" id="filter-error">(.*?)</p>', r.text)
    assert m is not None and "\n" not in m.group(1) and "Traceback" not in r.text
    message = html.unescape(m.group(1))
    assert message.startswith("sort 'slowest': use one of") and all(k in message for k in KEYS)
    # A cursor of another order, or none at all.
    for params in ({"sort": "-ttft", "cursor": "12"}, {"cursor": "x" * 5000}):
        r = client.get("/", params=params)
        assert r.status_code == 400 and "cursor" in r.text and "Traceback" not in r.text
    # A time range as `ssetape list --min-ttft` refuses it: named on the list, like `since`.
    r = client.get("/", params={"min_ttft": "2"})
    assert r.status_code == 200 and "min_ttft &#x27;2&#x27;: use a time like" in r.text


def test_a_range_filter_in_the_url_narrows_the_list_and_stays_in_its_form(
    sorted_store: tuple[str, dict[int, Any], TestClient],
) -> None:
    _, values, client = sorted_store
    text = client.get("/", params={"min_ttft": "2s", "max_gap": "1s"}).text
    want = {i for i, v in values.items() if (v["ttft"] or 0) >= 2e6 and (v["gap"] or 2e6) <= 1e6}
    assert {int(i) for i in ROW_ID.findall(text)} == want != set()
    assert 'name="min_ttft" value="2s"' in text and 'name="max_gap" value="1s"' in text
