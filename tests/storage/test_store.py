"""Store: opening, migrations, refusal of bad targets, settings and queries."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import sqlite3
import stat
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import delete, func, inspect, select, text

from ssetape.storage.models import Base, Chunk, Event, Exchange, include_object
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store, StoreError

Fields = Callable[..., dict[str, Any]]
TABLES = {
    "exchanges",
    "events",
    "chunks",
    "settings",
    "findings",
    "recorder_runs",
    "alembic_version",
}
HEAD = "0016"  # the newest revision in migrations/versions


def test_the_head_a_store_opens_at_without_alembic_is_alembics() -> None:
    from alembic.script import ScriptDirectory

    from ssetape.storage.store import SCHEMA_HEAD, alembic_config

    assert SCHEMA_HEAD == HEAD == ScriptDirectory.from_config(alembic_config()).get_current_head()


def revision(store: Store) -> list[str]:
    with store.engine.connect() as conn:
        return list(conn.execute(text("SELECT version_num FROM alembic_version")).scalars())


def add_exchange(store: Store, fields: Fields, uid: str, **overrides: Any) -> int:
    with store.Session.begin() as s:
        ex = Exchange(uid=uid, **fields(**overrides))
        s.add(ex)
        s.flush()
        return ex.id


# -- opening and migrating ---------------------------------------------------


def test_open_migrates_new_database_and_reopens_idempotently(store_url: str) -> None:
    with Store.open(store_url) as store:
        assert set(inspect(store.engine).get_table_names()) >= TABLES
        assert revision(store) == [HEAD]
        assert store.is_sqlite == store_url.startswith("sqlite")
    with Store.open(store_url) as again:
        assert revision(again) == [HEAD]


def test_concurrent_opens_of_a_fresh_database_all_succeed(store_url: str) -> None:
    # A fleet of recorders starting at once: migrations must serialise.
    def open_close(_: int) -> list[str]:
        with Store.open(store_url) as s:
            return revision(s)

    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(open_close, range(4))) == [[HEAD]] * 4


def test_newer_schema_revision_is_refused_without_touching_the_file(tmp_path: Path) -> None:
    path = tmp_path / "newer.db"
    Store.open(str(path)).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999'")
    conn.close()
    before = path.read_bytes()
    with pytest.raises(StoreError) as err:
        Store.open(str(path))
    assert str(err.value) == (
        f"database schema revision 9999 is newer than this ssetape knows (head {HEAD}): "
        "upgrade ssetape"
    )
    assert path.read_bytes() == before


def test_newer_schema_revision_is_refused_on_any_backend(store_url: str) -> None:
    with Store.open(store_url) as store, store.engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0042'"))
    with pytest.raises(StoreError, match=r"revision 0042 is newer .*: upgrade ssetape"):
        Store.open(store_url)


def test_text_file_is_not_an_sqlite_database(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_text("just some notes, not a database\n" * 10)
    with pytest.raises(StoreError) as err:
        Store.open(str(path))
    assert str(err.value) == f"{path} is not an SQLite database"
    assert path.read_text().startswith("just some notes")


def test_create_false_on_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "missing.db"
    with pytest.raises(StoreError) as err:
        Store.open(str(path), create=False)
    assert str(err.value) == (
        f"no ssetape database at {path} (record something first, or check --db)"
    )
    assert not path.exists()


def test_missing_parent_directory(tmp_path: Path) -> None:
    path = tmp_path / "no" / "such" / "dir" / "x.db"
    with pytest.raises(StoreError, match=r"directory .*/no/such/dir does not exist"):
        Store.open(str(path))


@contextmanager
def as_unprivileged_user() -> Iterator[None]:
    """Root ignores directory permissions; drop to nobody for the duration."""
    if os.geteuid() != 0:
        yield
        return
    os.seteuid(65534)
    try:
        yield
    finally:
        os.seteuid(0)


def test_unwritable_directory(tmp_path: Path) -> None:
    # Outside tmp_path: pytest's base directory is not searchable by nobody.
    directory = Path(tempfile.mkdtemp(prefix="ssetape-ro-"))
    try:
        directory.chmod(0o555)
        path = directory / "x.db"
        with as_unprivileged_user(), pytest.raises(StoreError) as err:
            Store.open(str(path))
        assert str(err.value).startswith(f"cannot create {path}: directory {directory}")
        assert "not writable" in str(err.value)
        assert not path.exists()
    finally:
        directory.chmod(0o755)
        shutil.rmtree(directory)


def test_new_file_is_private_and_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "private.db"
    old = os.umask(0o022)
    try:
        store = Store.open(str(path))
    finally:
        os.umask(old)
    try:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        with store.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 5000
            assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
    finally:
        store.close()
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    raw.close()


def test_unreachable_postgres_is_one_line_without_password() -> None:
    with pytest.raises(StoreError) as err:
        Store.open("postgresql+psycopg://ssetape:s3cret@127.0.0.1:1/nowhere")
    msg = str(err.value)
    assert msg.startswith(
        "cannot connect to postgresql+psycopg://ssetape:***@127.0.0.1:1/nowhere: "
    )
    assert "s3cret" not in msg and "\n" not in msg


def test_unsupported_url() -> None:
    with pytest.raises(StoreError, match="unsupported database 'mysql'"):
        Store.open("mysql://u:p@localhost/db")


# -- settings ------------------------------------------------------------------


def test_settings(store: Store, store_url: str) -> None:
    assert store.setting("redaction_key") is None
    store.set_setting("theme", "dark")
    store.set_setting("theme", "light")
    assert store.setting("theme") == "light"
    first = store.get_or_create_setting("redaction_key", lambda: "k1")
    assert first == "k1"
    assert store.get_or_create_setting("redaction_key", lambda: "k2") == "k1"
    # A second process with its own engine sees the same value.
    with Store.open(store_url) as other:
        assert other.get_or_create_setting("redaction_key", lambda: "k3") == "k1"


def test_get_or_create_setting_race_keeps_one_value(store_url: str) -> None:
    stores = [Store.open(store_url) for _ in range(4)]
    try:
        with ThreadPoolExecutor(4) as pool:
            values = list(
                pool.map(
                    lambda i: stores[i].get_or_create_setting("key", lambda: f"v{i}"),
                    range(4),
                )
            )
        assert len(set(values)) == 1
        assert stores[0].setting("key") == values[0]
    finally:
        for s in stores:
            s.close()


# -- queries -------------------------------------------------------------------


def test_exchange_round_trip(store: Store, exchange_fields: Fields) -> None:
    started = dt.datetime(2025, 3, 1, 12, 30, 15, 123456, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    headers = [["Z-Last", "1"], ["A-First", "2"], ["Z-Last", "3"]]
    xid = add_exchange(
        store, exchange_fields, "a" * 32, started_at=started, request_headers=headers
    )
    ex = Queries(store).exchange(xid)
    assert ex is not None
    assert ex.uid == "a" * 32
    assert ex.started_at == started and ex.started_at.tzinfo is not None
    assert ex.started_at.utcoffset() == dt.timedelta(0)
    assert ex.request_headers == headers  # order and duplicates kept
    assert ex.request_body == b'{"model":"gpt-4o-mini","stream":true}'
    assert ex.response_headers is None and ex.status is None
    assert ex.state == "recording" and ex.event_count == 0
    assert Queries(store).exchange("a" * 32) is not None
    assert Queries(store).exchange(str(xid)) is not None
    assert Queries(store).exchange(xid + 1000) is None
    assert Queries(store).exchange("f" * 32) is None


def test_exchanges_order_and_limit(store: Store, exchange_fields: Fields) -> None:
    base = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
    for i, minutes in enumerate([5, 1, 3]):
        add_exchange(
            store, exchange_fields, f"{i:032x}", started_at=base + dt.timedelta(minutes=minutes)
        )
    assert [e.uid[-1] for e in Queries(store).exchanges()] == ["0", "2", "1"]
    assert [e.uid[-1] for e in Queries(store).exchanges(newest_first=False)] == ["1", "2", "0"]
    assert [e.uid[-1] for e in Queries(store).exchanges(limit=2)] == ["0", "2"]


def test_events_and_chunks_in_seq_order_and_cascade(store: Store, exchange_fields: Fields) -> None:
    xid = add_exchange(store, exchange_fields, "b" * 32)
    with store.Session.begin() as s:
        for seq in (2, 0, 1):
            raw = f"data: {seq}\n\n".encode()
            s.add(
                Event(
                    exchange_id=xid,
                    seq=seq,
                    offset_us=seq * 10,
                    event="message",
                    data=str(seq),
                    raw=raw,
                )
            )
            s.add(Chunk(exchange_id=xid, seq=seq, offset_us=seq * 10, data=bytes([seq]) * 3))
    events = list(Queries(store).events(xid))
    assert [e.seq for e in events] == [0, 1, 2]
    assert b"".join(e.raw for e in events) == b"data: 0\n\ndata: 1\n\ndata: 2\n\n"
    assert [c.data for c in Queries(store).chunks(xid)] == [b"\0\0\0", b"\1\1\1", b"\2\2\2"]
    with store.Session.begin() as s:
        s.execute(delete(Exchange).where(Exchange.id == xid))
    with store.Session() as s:
        # PostgreSQL's events have no foreign key (migration 0009): whoever deletes an
        # exchange deletes its events first, as prune does; or its day's partition goes.
        left = 0 if store.is_sqlite else 3
        assert s.scalar(select(func.count()).select_from(Event)) == left
        assert s.scalar(select(func.count()).select_from(Chunk)) == 0


def test_mark_interrupted(store: Store, exchange_fields: Fields) -> None:
    add_exchange(store, exchange_fields, "1" * 32, recorder="a:1:0")
    add_exchange(store, exchange_fields, "2" * 32, recorder="b:2:0")
    add_exchange(store, exchange_fields, "3" * 32, recorder="a:1:0", state="completed")
    assert store.mark_interrupted(recorder="a:1:0") == 1
    states = {e.uid[0]: e.state for e in Queries(store).exchanges()}
    assert states == {"1": "interrupted", "2": "recording", "3": "completed"}
    assert store.mark_interrupted() == 1
    assert store.mark_interrupted() == 0
    assert {e.state for e in Queries(store).exchanges()} == {"interrupted", "completed"}


# For LIKE: the model prefix (0010) and --grep's trigrams (0011).
def test_migrations_match_the_models(store: Store) -> None:
    # The initial revision is written by hand: it must not drift from models.py.
    with store.engine.connect() as conn:
        # What the migrations give one backend on purpose is named in one place.
        include = include_object(store.engine.dialect.name)
        opts = {"compare_type": True, "include_object": include}
        context = MigrationContext.configure(conn, opts=opts)
        assert compare_metadata(context, Base.metadata) == []
