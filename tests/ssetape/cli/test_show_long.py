"""`ssetape show` of long recordings: the first screen, not the whole stream, unless asked;
what is left out is said, with how to see it; JSON is written as it is read."""

from __future__ import annotations

import subprocess
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from bench.tapes import build_stream
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from ssetape.views.documents import EVENTS_SHOWN, write_detail
from tests.conftest import SSETAPE

EVENTS = 50_000
PAD = "x" * 20  # 1.9 MB of stream: more than `show --json` holds of a body


def raw(i: int) -> str:
    return f'data: {{"i":{i}{PAD}}}\n\n'


@pytest.fixture(scope="module")
def long_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    db = str(tmp_path_factory.mktemp("long") / "long.db")
    build_stream(db, events=EVENTS, headers=5_000, pad=len(PAD))
    return db


def show(db: str, *args: str) -> str:
    r = subprocess.run(
        [SSETAPE, "show", "1", "--db", db, *args], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def seqs(out: str) -> list[int]:
    """The seq column of the printed events (rows whose data is {"i":seq})."""
    return [int(line.split()[0]) for line in out.splitlines() if '{"i":' in line]


def test_show_prints_the_first_events_and_says_how_many_more(long_db: str) -> None:
    out = show(long_db)
    assert seqs(out) == list(range(EVENTS_SHOWN))
    more = EVENTS - EVENTS_SHOWN
    assert f"… {more:,} more events: --events {EVENTS_SHOWN}:{2 * EVENTS_SHOWN} shows the" in out
    assert f"{EVENTS:,} events" in out
    # 5,000 headers: the first hundred, and the count of the others.
    assert "x-h98 value 98" in out and "x-h99 " not in out
    assert "… 4,900 more headers; show --full prints them" in out


def test_a_range_shows_those_events_and_the_end_says_nothing_more(long_db: str) -> None:
    assert seqs(show(long_db, "--events", "20000:20005")) == list(range(20_000, 20_005))
    tail = show(long_db, "--events", f"{EVENTS - 3}:")
    assert seqs(tail) == [EVENTS - 3, EVENTS - 2, EVENTS - 1]
    assert "more events" not in tail
    r = subprocess.run([SSETAPE, "show", "1", "--db", long_db, "--events", "9:3"],
                       capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 2 and "use A:B" in r.stderr


def test_full_shows_every_event_and_header(tmp_path: Path) -> None:
    db = str(tmp_path / "mid.db")
    build_stream(db, events=2 * EVENTS_SHOWN + 5, headers=300)
    out = show(db, "--full")
    assert seqs(out) == list(range(2 * EVENTS_SHOWN + 5))
    assert "x-h298 value 298" in out and "more" not in out


def test_json_holds_the_first_events_and_the_count(long_db: str) -> None:
    doc = orjson.loads(show(long_db, "--json"))
    assert doc["events_total"] == EVENTS
    assert [e["seq"] for e in doc["events"]] == list(range(EVENTS_SHOWN))
    body = "".join(map(raw, range(EVENTS)))
    assert doc["response"]["body"] == body[: 1024 * 1024]  # cut at JSON_MAX, saying so
    assert doc["response"]["body_bytes"] == len(body)
    ranged = orjson.loads(show(long_db, "--json", "--events", "100:102"))
    assert [e["raw"] for e in ranged["events"]] == [raw(100), raw(101)]


def test_full_json_is_the_whole_exchange_written_in_pages(long_db: str, tmp_path: Path) -> None:
    """--full --json of the whole stream holds a page at a time: a small part of what holding
    its events takes (2M events held took 6.48 GiB)."""
    path = tmp_path / "doc.json"
    with Store.open(long_db) as store, path.open("wb") as out:
        queries = Queries(store)
        x = queries.exchange(1)
        assert x is not None
        held, peak = (
            peak_of(lambda: list(Queries(store).events(1))),
            peak_of(lambda: write_detail(out, x, queries, [], full=True)),
        )
    written = path.read_bytes()
    doc = orjson.loads(written)
    assert [e["seq"] for e in doc["events"]] == list(range(EVENTS))
    assert doc["response"]["body"] == "".join(map(raw, range(EVENTS)))
    assert "body_bytes" not in doc["response"]
    assert peak < held / 5, (peak, held)


def peak_of(work: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        work()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_the_timeline_counts_every_event(long_db: str, tmp_path: Path) -> None:
    out = show(long_db, "--timeline")
    assert f"{EVENTS:,} events" in out
    svg = tmp_path / "t.svg"
    assert f"({EVENTS} events)" in show(long_db, "--svg", str(svg))
    assert svg.read_text().count('class="mark"') == 0  # past 5000: per column, not per event
