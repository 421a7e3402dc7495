"""Search by prompt in the store: the text filter matches the request's text too, read through
an index on both backends (SQLite's FTS5 table made anew by migration 0015, PostgreSQL's
trigram index), and each match comes back as the text around it, cut by the database."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import create_engine, event, select, update

from ssetape.storage.filters import ExchangeFilter
from ssetape.storage.models import Exchange
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store, alembic_config
from ssetape.storage.text_index import TABLE, TRIGGERS, TextIndex
from ssetape.storage.text_matches import AROUND, CUT, TextMatches
from ssetape.vocabulary import MatchedIn

Fields = Callable[..., dict[str, Any]]
INVOICE = "INV-2026-000417"
PROMPTS = [
    f"Pay invoice {INVOICE} by Friday.",
    "Summarise this contract.",
    None,
    "x" * 500 + f" then {INVOICE} " + "y" * 500,
    "What is the weather in Paris?",
]


def _fill(store: Store, fields: Fields, n: int = 40) -> None:
    with store.Session.begin() as s:
        for i in range(n):
            s.add(
                Exchange(
                    uid=f"{i:032d}",
                    state="completed",
                    **fields(
                        request_text=PROMPTS[i % len(PROMPTS)],
                        output_text="an answer about Paris" if i % 3 else None,
                    ),
                )
            )


def _plain(store: Store, flt: ExchangeFilter) -> list[int]:
    with store.engine.connect() as conn:
        return sorted(conn.execute(flt.apply(select(Exchange.id))).scalars())


def _ids(store: Store, text: str) -> list[int]:
    return sorted(x.id for x in Queries(store).exchanges(ExchangeFilter(text=text), limit=50))


def test_a_phrase_of_a_prompt_finds_its_exchanges(store: Store, exchange_fields: Fields) -> None:
    _fill(store, exchange_fields)
    found = _ids(store, INVOICE)
    assert found == [i + 1 for i in range(40) if i % 5 in (0, 3)]
    assert found == _plain(store, ExchangeFilter(text=INVOICE))
    # Beside the output and the path, as before.
    assert len(_ids(store, "Paris")) == len([i for i in range(40) if i % 3 or i % 5 == 4])
    assert len(_ids(store, "/v1/chat")) == 40
    assert _ids(store, "INV-2026-000418") == []


def test_each_match_is_the_text_around_it(store: Store, exchange_fields: Fields) -> None:
    _fill(store, exchange_fields, n=10)
    matches = TextMatches(store)
    found = matches.around(range(1, 11), INVOICE)
    assert sorted(found) == [1, 4, 6, 9]
    short, long = found[1], found[4]
    assert (short.where, short.before, short.hit, short.after) == (
        MatchedIn.PROMPT, "Pay invoice ", INVOICE, " by Friday."
    )  # fmt: skip
    assert long.before == CUT + "x" * (AROUND - len(" then ")) + " then "
    assert long.after == " " + "y" * (AROUND - 1) + CUT
    assert long.hit == INVOICE
    # The prompt first; else the output; else the path.
    paris = matches.around([1, 2, 5], "Paris")
    assert paris[5].where == MatchedIn.PROMPT  # "What is the weather in Paris?"
    assert paris[2].where == MatchedIn.OUTPUT and paris[2].snippet == "an answer about Paris"
    assert 1 not in paris  # no output, and a prompt without it
    assert matches.around([1], "chat/comp")[1].where == MatchedIn.PATH
    # As the filter matches: SQLite folds ASCII case, PostgreSQL is exact.
    folded = matches.around([1], "PAY INVOICE")
    assert (folded[1].hit == "Pay invoice") if store.is_sqlite else folded == {}
    # A long text searched: its start, and no more.
    assert matches.around([4], "x" * 300)[4].hit == "x" * 200 + CUT


def test_the_snippets_of_a_big_page_are_read_in_batches(
    store: Store, exchange_fields: Fields
) -> None:
    _fill(store, exchange_fields, n=1000)
    found = TextMatches(store).around(range(1, 1001), INVOICE)
    assert len(found) == 400 and {m.where for m in found.values()} == {MatchedIn.PROMPT}


def _plan(store: Store, text: str) -> list[str]:
    """The plan of the page `list --grep TEXT` reads."""
    seen: list[tuple[str, Any]] = []

    def listen(*args: Any) -> None:
        seen.append((args[2], args[3]))

    event.listen(store.engine, "before_cursor_execute", listen)
    try:
        Queries(store).exchanges(ExchangeFilter(text=text), limit=50)
    finally:
        event.remove(store.engine, "before_cursor_execute", listen)
    sql, params = next((s, p) for s, p in seen if s.startswith("SELECT exchanges.id"))
    with store.engine.connect() as conn:
        raw = conn.connection.driver_connection
        assert raw is not None
        if store.is_sqlite:
            return [row[3] for row in raw.execute(f"EXPLAIN QUERY PLAN {sql}", params)]
        with raw.cursor() as cur:
            # A few rows: the planner would rather read them all (or walk the time index);
            # the trigram index must be one it can read.
            cur.execute("SET enable_seqscan = off")
            cur.execute("SET enable_indexscan = off")
            cur.execute(f"EXPLAIN {sql}", params)
            return [row[0] for row in cur.fetchall()]


def test_a_prompt_search_reads_an_index(store: Store, exchange_fields: Fields) -> None:
    _fill(store, exchange_fields)
    plan = "\n".join(_plan(store, INVOICE))
    if store.is_sqlite:
        assert "SEARCH exchanges USING INTEGER PRIMARY KEY (rowid=?)" in plan, plan
        assert f"SCAN {TABLE} VIRTUAL TABLE INDEX 0:L2" in plan, plan  # request_text: column 2
    else:
        assert "Bitmap Index Scan on ix_exchanges_request_text_trgm" in plan, plan


def _index_is_whole(store: Store) -> None:
    with store.engine.begin() as conn:
        conn.exec_driver_sql(f"INSERT INTO {TABLE}({TABLE}, rank) VALUES ('integrity-check', 1)")


@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)
def test_the_index_follows_a_prompt_written_later(store: Store, exchange_fields: Fields) -> None:
    """As a reindex fills the rows stored before: the index follows the update."""
    _fill(store, exchange_fields, n=5)
    assert _ids(store, "kilimanjaro") == []
    with store.Session.begin() as s:
        s.execute(update(Exchange).where(Exchange.id == 3).values(request_text="To Kilimanjaro"))
    _index_is_whole(store)
    assert Queries(store).narrowing._texts("kilimanjaro") == 1
    assert _ids(store, "kilimanjaro") == [3]


def _at(url: str, revision: str, fields: Fields | None = None) -> None:
    """The store at ``url`` migrated to ``revision`` (with one exchange, ``fields`` given)."""
    engine = create_engine(url)
    cfg = alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
        if fields is not None:
            row = {**fields(output_text="in zanzibar"), "uid": "a" * 32, "state": "completed"}
            conn.execute(Exchange.__table__.insert(), [row])
    engine.dispose()


def _columns(path: Path) -> str:
    with sqlite3.connect(path) as raw:
        (sql,) = raw.execute("SELECT sql FROM sqlite_master WHERE name = ?", (TABLE,)).fetchone()
    return str(sql)


def test_a_store_of_0014_gets_the_prompt_indexed_when_it_migrates(
    tmp_path: Path, exchange_fields: Fields
) -> None:
    path = tmp_path / "old.db"
    _at(f"sqlite:///{path}", "0014", exchange_fields)
    assert "request_text" not in _columns(path)
    with Store.open(str(path)) as store:
        assert "request_text" in _columns(path)
        _index_is_whole(store)
        assert Queries(store).narrowing._texts("zanzibar") == 1  # the outputs indexed again
        with store.Session.begin() as s:
            s.execute(update(Exchange).values(request_text="Pay INV-1"))
        assert Queries(store).narrowing._texts("pay inv-1") == 1
        # And back: 0015's downgrade leaves 0012's index, whole.
        with store.writing_engine.begin() as conn:
            cfg = alembic_config()
            cfg.attributes["connection"] = conn
            command.downgrade(cfg, "0014")
    assert "request_text" not in _columns(path)
    with sqlite3.connect(path) as raw:
        names = {r[0] for r in raw.execute("SELECT name FROM sqlite_master")}
        raw.execute(f"INSERT INTO {TABLE}({TABLE}, rank) VALUES ('integrity-check', 1)")
    assert set(TRIGGERS) <= names


def _tokenizer(path: Path, old: str, new: str) -> None:
    raw = sqlite3.connect(path)
    raw.execute("PRAGMA writable_schema = ON")
    raw.execute(
        "UPDATE sqlite_master SET sql = replace(sql, ?, ?) WHERE name = ?", (old, new, TABLE)
    )
    raw.commit()
    raw.close()


def test_a_store_migrated_where_sqlite_cannot_index_gets_it_where_it_can(
    tmp_path: Path, exchange_fields: Fields, caplog: pytest.LogCaptureFixture
) -> None:
    """0015 on a SQLite without the trigram tokenizer can drop the old index's triggers but
    not its table, nor make the new one: the store still records, --grep reads every
    exchange, and the first open by a SQLite that can makes the index anew."""
    path = tmp_path / "moved.db"
    url = f"sqlite:///{path}"
    _at(url, "0014", exchange_fields)
    _tokenizer(path, "trigram", "trigram_x")  # as an older SQLite sees it
    _at(url, "head")
    assert "request_text" not in _columns(path)  # the old table, left
    with Store.open(str(path)) as store:
        with store.Session.begin() as s:  # recording goes on
            s.add(Exchange(uid="b" * 32, state="completed",
                           **exchange_fields(request_text="to zanzibar")))  # fmt: skip
        with store.engine.connect() as conn:
            assert not TextIndex.ready(conn)
        assert _ids(store, "zanzibar") == [1, 2]  # read by a scan
    _tokenizer(path, "trigram_x", "trigram")
    with caplog.at_level(logging.WARNING, "ssetape.storage"), Store.open(str(path)) as store:
        assert "request_text" in _columns(path)
        _index_is_whole(store)
        assert Queries(store).narrowing._texts("zanzibar") == 2
        assert _ids(store, "zanzibar") == [1, 2]
    assert [r.getMessage() for r in caplog.records] == [
        "ssetape: building the store's text index (--grep)"
    ]
