"""What SQLite reads for a filter (storage.narrowing) and its text index (storage.text_index):
the same exchanges as the filter's own clause, read through an index; an absent model or
word found absent without reading the exchanges; an index that follows every write, and a
store that still records where SQLite cannot keep that index."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import create_engine, delete, event, select, update

from ssetape.storage import narrowing as narrowing_module
from ssetape.storage.filters import ExchangeFilter
from ssetape.storage.models import Exchange
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store, alembic_config
from ssetape.storage.text_index import TABLE, TRIGGERS

MODELS = ["gpt-4o-mini", "GPT-4o-2024-08-06", "gpt-4.1", "claude-sonnet-4", "Éclair-7b", None]
TEXTS = ["a plain answer", "in Zanzibar, 100%_sure", "école", None, "zanzibar again"]

FILTERS = [
    ExchangeFilter(model="gpt-4o"),
    ExchangeFilter(model="GPT-4"),
    ExchangeFilter(model="gpt-4.1"),
    ExchangeFilter(model="éclair"),  # LIKE folds ASCII only: no match on SQLite
    ExchangeFilter(model="Éclair"),
    ExchangeFilter(model="text-davinci-003"),
    ExchangeFilter(model="gpt%"),  # literal
    ExchangeFilter(text="zanzibar"),
    ExchangeFilter(text="ZANZIBAR, 100%_"),
    ExchangeFilter(text="100%"),
    ExchangeFilter(text="école"),
    ExchangeFilter(text="ÉCOLE"),  # LIKE folds ASCII only, the index folds more
    ExchangeFilter(text="qwertyuiop"),
    ExchangeFilter(text="an"),  # too short for the index
    ExchangeFilter(text="messages"),  # in the path only
    ExchangeFilter(text="_"),
    ExchangeFilter(model="gpt", text="zanzibar", api="chat_completions"),
]


@pytest.fixture
def filled(store: Store, exchange_fields: Callable[..., dict[str, Any]]) -> Store:
    with store.Session.begin() as s:
        for n in range(60):
            path = "/v1/messages" if n % 7 == 0 else "/v1/chat/completions"
            s.add(
                Exchange(
                    uid=f"{n:032d}",
                    state="completed",
                    **exchange_fields(
                        model=MODELS[n % len(MODELS)],
                        output_text=TEXTS[n % len(TEXTS)],
                        path=path,
                        api="messages" if n % 7 == 0 else "chat_completions",
                    ),
                )
            )
    return store


def _plain(store: Store, flt: ExchangeFilter) -> list[int]:
    """What the filter's own clause matches, newest first."""
    stmt = flt.apply(select(Exchange.id)).order_by(Exchange.started_at.desc(), Exchange.id.desc())
    with store.engine.connect() as conn:
        return list(conn.execute(stmt).scalars())


@pytest.fixture
def statements(store: Store) -> Iterator[list[tuple[str, Any]]]:
    seen: list[tuple[str, Any]] = []

    def listen(*args: Any) -> None:
        seen.append((args[2], args[3]))

    event.listen(store.engine, "before_cursor_execute", listen)
    yield seen
    event.remove(store.engine, "before_cursor_execute", listen)


@pytest.mark.parametrize("common", [None, 2], ids=["rare", "common"])
def test_every_filter_reads_what_its_own_clause_matches(
    filled: Store, monkeypatch: pytest.MonkeyPatch, common: int | None
) -> None:
    if common is not None:
        monkeypatch.setattr(narrowing_module, "COMMON", common)
        # And a prefix that names more models than one IN may: matched by LIKE instead.
        monkeypatch.setattr(narrowing_module, "IN_LIMIT", 1)
    queries = Queries(filled)
    for flt in FILTERS:
        want = _plain(filled, flt)
        assert [x.id for x in queries.exchanges(flt)] == want, flt
        assert [x.id for x in queries.exchanges(flt, limit=50)] == want[:50], flt
        assert len(list(queries.stat_rows("model", flt))) == len(want), flt
    # What a user would check: the prefix finds the dated model, case aside (SQLite's LIKE).
    models = {x.model for x in queries.exchanges(ExchangeFilter(model="gpt-4o"))}
    assert models == ({"gpt-4o-mini", "GPT-4o-2024-08-06"} if filled.is_sqlite else {"gpt-4o-mini"})
    assert queries.exchanges(ExchangeFilter(text="qwertyuiop")) == []


def _plan(store: Store, sql: str, params: Any) -> list[str]:
    with store.engine.connect() as conn:
        raw = conn.connection.driver_connection
        assert raw is not None
        return [row[3] for row in raw.execute(f"EXPLAIN QUERY PLAN {sql}", params)]


@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)
def test_an_absent_model_or_word_is_found_absent_without_reading_the_exchanges(
    filled: Store, statements: list[tuple[str, Any]]
) -> None:
    queries = Queries(filled)

    def listing() -> tuple[str, Any]:
        (found,) = [(sql, p) for sql, p in statements if sql.startswith("SELECT exchanges.id")]
        return found

    for flt in (ExchangeFilter(model="text-davinci-003"), ExchangeFilter(text="qwertyuiop")):
        statements.clear()
        assert queries.exchanges(flt, limit=50) == []
        assert "LIKE" not in listing()[0]  # the clause became "false": nothing is read
    # A word a few exchanges hold: its exchanges are read by id off the text index, not found
    # by walking every exchange.
    statements.clear()
    assert len(queries.exchanges(ExchangeFilter(text="messages"), limit=50)) == 9
    plan = _plan(filled, *listing())
    assert plan[0] == "SEARCH exchanges USING INTEGER PRIMARY KEY (rowid=?)", plan
    assert f"SCAN {TABLE} VIRTUAL TABLE INDEX 0:L0" in plan, plan


def _index_is_whole(store: Store) -> None:
    """FTS5's own check of its index against the exchanges (raises if they differ)."""
    with store.engine.begin() as conn:
        conn.exec_driver_sql(f"INSERT INTO {TABLE}({TABLE}, rank) VALUES ('integrity-check', 1)")


@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)
def test_the_text_index_follows_every_write(filled: Store) -> None:
    queries = Queries(filled)
    word = ExchangeFilter(text="kilimanjaro")
    assert queries.exchanges(word) == []
    with filled.Session.begin() as s:
        s.execute(update(Exchange).where(Exchange.id == 3).values(output_text="to Kilimanjaro"))
        s.execute(update(Exchange).where(Exchange.id == 4).values(status=200))  # not the text
        s.execute(delete(Exchange).where(Exchange.id == 10))
    _index_is_whole(filled)
    assert [x.id for x in queries.exchanges(word)] == [3]
    with filled.Session.begin() as s:
        s.execute(update(Exchange).where(Exchange.id == 3).values(output_text=None))
    _index_is_whole(filled)
    assert queries.exchanges(word) == []


def test_a_store_made_before_the_index_is_indexed_when_it_migrates(
    tmp_path: Path, exchange_fields: Callable[..., dict[str, Any]]
) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = create_engine(url)
    cfg = alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0011")
        conn.execute(
            Exchange.__table__.insert(),
            [{**exchange_fields(output_text="in zanzibar"), "uid": "a" * 32, "state": "completed"}],
        )
    engine.dispose()
    with Store.open(url) as store:
        _index_is_whole(store)
        assert Queries(store).narrowing._texts("zanzibar") == 1
        assert [x.uid for x in Queries(store).exchanges(ExchangeFilter(text="zanzibar"))] == [
            "a" * 32
        ]


def _tokenizer(path: Path, old: str, new: str) -> None:
    raw = sqlite3.connect(path)
    raw.execute("PRAGMA writable_schema = ON")
    raw.execute(
        "UPDATE sqlite_master SET sql = replace(sql, ?, ?) WHERE name = ?", (old, new, TABLE)
    )
    raw.commit()
    raw.close()


def _old_sqlite(path: Path, fields: Callable[..., dict[str, Any]]) -> None:
    """A store with one exchange, as an older SQLite (before 3.34) sees it: a tokenizer it
    does not have."""
    with Store.open(str(path)) as store, store.Session.begin() as s:
        s.add(Exchange(uid="a" * 32, state="completed", **fields(output_text="zanzibar")))
    _tokenizer(path, "trigram", "trigram_x")


def test_where_sqlite_cannot_keep_the_index_the_store_still_records(
    tmp_path: Path, exchange_fields: Callable[..., dict[str, Any]], caplog: pytest.LogCaptureFixture
) -> None:
    """A store moved to a SQLite without the trigram tokenizer (before 3.34): opening it drops
    the triggers that would fail every insert, says so once, and --grep reads every exchange;
    back on a SQLite that has it, the next open puts them back and rebuilds the index."""
    path = tmp_path / "moved.db"
    _old_sqlite(path, exchange_fields)
    with caplog.at_level(logging.WARNING, "ssetape.storage"), Store.open(str(path)) as store:
        with store.Session.begin() as s:  # recording goes on
            s.add(
                Exchange(
                    uid="b" * 32, state="completed", **exchange_fields(output_text="zanzibar too")
                )
            )
        flt = ExchangeFilter(text="zanzibar")
        assert len(Queries(store).exchanges(flt)) == 2
        assert Queries(store).narrowing._texts("zanzibar") is None  # not asked: a scan
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "cannot keep the store's text index" in said[0]
    caplog.clear()
    _tokenizer(path, "trigram_x", "trigram")  # back on one that has it
    # Two processes opening it at once (threads here): it is mended once, both open.
    with caplog.at_level(logging.WARNING, "ssetape.storage"), ThreadPoolExecutor(2) as pool:
        opened = list(pool.map(lambda _: Store.open(str(path)), range(2)))
    for other in opened[1:]:
        other.close()
    with opened[0] as store:
        _index_is_whole(store)
        with store.engine.connect() as conn:
            names = {r[0] for r in conn.exec_driver_sql("SELECT name FROM sqlite_master")}
        assert set(TRIGGERS) <= names
        assert Queries(store).narrowing._texts("zanzibar") == 2
    assert [r.getMessage() for r in caplog.records] == [
        "ssetape: rebuilding the store's text index (--grep)"
    ]


def test_a_store_made_without_the_index_gets_it_where_sqlite_can_make_it(
    tmp_path: Path,
    exchange_fields: Callable[..., dict[str, Any]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Migration 0012 on a SQLite without the trigram tokenizer makes nothing; the first open
    by one that has it builds the index."""
    path = tmp_path / "made-old.db"
    with Store.open(str(path)) as store:
        with store.Session.begin() as s:
            s.add(
                Exchange(uid="a" * 32, state="completed", **exchange_fields(output_text="zanzibar"))
            )
        with store.engine.begin() as conn:  # as 0012 leaves it there
            for name in TRIGGERS:
                conn.exec_driver_sql(f"DROP TRIGGER {name}")
            conn.exec_driver_sql(f"DROP TABLE {TABLE}")
    with caplog.at_level(logging.WARNING, "ssetape.storage"), Store.open(str(path)) as store:
        _index_is_whole(store)
        assert Queries(store).narrowing._texts("zanzibar") == 1
    assert [r.getMessage() for r in caplog.records] == [
        "ssetape: building the store's text index (--grep)"
    ]


def test_a_reader_whose_sqlite_cannot_read_the_index_scans(
    tmp_path: Path, exchange_fields: Callable[..., dict[str, Any]]
) -> None:
    """`--read-db` never mends a store: where its SQLite cannot read the index (the tokenizer
    renamed, as an older SQLite sees it), --grep reads every exchange instead of failing."""
    path = tmp_path / "read.db"
    _old_sqlite(path, exchange_fields)
    with Store.open_read_only(str(path)) as store:
        assert Queries(store).narrowing._texts("zanzibar") is None
        found = Queries(store).exchanges(ExchangeFilter(text="zanzibar"))
        assert [x.uid for x in found] == ["a" * 32]
