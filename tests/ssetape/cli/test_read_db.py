"""`--read-db` / SSETAPE_READ_DB (issue 26) without a standby: the readers read the store it
names and leave --db alone, a read-only open checks the schema and never migrates, mistakes
are one line, and the commands that write do not take it. The real hot standby is in
tests/storage/test_standby.py."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from alembic import command
from click.testing import CliRunner
from sqlalchemy import text

from ssetape.cli.main import main
from ssetape.storage.standby import is_standby, standby_state
from ssetape.storage.store import Store, StoreError, alembic_config
from tests.addons.stores import store_target
from tests.ssetape.cli.test_cli import assert_one_line_error, run
from tests.storage.test_prune import Feed


def cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args), catch_exceptions=False, color=False, env=env)
    return r.exit_code, r.stdout, r.stderr


@pytest.fixture(params=["sqlite", "postgresql"])
def recorded(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A store with one finished exchange (its --db value) and that exchange's uid."""
    with store_target(request.param, tmp_path) as target, Store.open(target) as store:
        feed = Feed(store)
        uid = feed.exchange(dt.datetime.now(dt.UTC), 3, prompt="read me")
        feed.settle()
        feed.close()
        yield target, uid


def test_readers_read_the_read_db_and_leave_db_alone(
    recorded: tuple[str, str], tmp_path: Path
) -> None:
    target, uid = recorded
    unused = tmp_path / "writes-go-here.db"
    code, out, err = cli("list", "--db", str(unused), "--read-db", target, "--json")
    assert code == 0 and [x["uid"] for x in orjson.loads(out)] == [uid], err
    assert err == "", "a store that is no standby has no lag to tell"
    code, out, err = cli(
        "show", "--read-db", target, uid, "--json", env={"SSETAPE_DB": str(unused)}
    )
    assert code == 0 and orjson.loads(out)["uid"] == uid and err == ""
    code, out, err = cli("stats", "--json", env={"SSETAPE_READ_DB": target,
                                                 "SSETAPE_DB": str(unused)})  # fmt: skip
    assert code == 0 and orjson.loads(out)[0]["count"] == 1, out
    code, out, _ = cli("list", env={"SSETAPE_READ_DB": target, "SSETAPE_DB": str(unused)})
    assert code == 0 and "read from a standby" not in out
    assert not unused.exists(), "a reader created the --db it does not use"


def test_a_read_only_open_never_migrates(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    with Store.open(str(db), migrate=False) as store, store.engine.begin() as conn:
        config = alembic_config()
        config.attributes["connection"] = conn
        command.upgrade(config, "0001")
    with pytest.raises(StoreError, match="behind this ssetape's"):
        Store.open_read_only(str(db))
    with Store.open(str(db), migrate=False) as store, store.engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == "0001"
    r = run("list", "--read-db", str(db))
    assert_one_line_error(r, "--read-db", "0001", "migrate the primary", "catch up")


def test_read_db_mistakes_are_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.db"
    assert_one_line_error(
        run("list", "--read-db", str(missing)), "--read-db", "no ssetape database"
    )
    assert not missing.exists(), "a read-only open created a store"
    assert_one_line_error(
        run("stats", "--read-db", "postgresql+psycopg://u:secret@127.0.0.1:1/x"), "--read-db"
    )
    assert "secret" not in run("list", "--read-db", "postgresql://u:secret@127.0.0.1:1/x").stderr


@pytest.mark.parametrize("command_", ["prune", "reindex", "record"])
def test_commands_that_write_do_not_take_read_db(command_: str, tmp_path: Path) -> None:
    r = run(command_, "--read-db", str(tmp_path / "x.db"))
    assert_one_line_error(r, "--read-db")
    assert r.returncode == 2


def test_a_primary_read_through_read_db_is_read_only(recorded: tuple[str, str]) -> None:
    target, _ = recorded
    with Store.open_read_only(target) as store:
        assert not is_standby(store.engine) and standby_state(store.engine) is None
        if store.is_sqlite:
            return
        with store.engine.connect() as conn:
            assert conn.execute(text("SHOW default_transaction_read_only")).scalar() == "on"
            # The URL's own options are kept (the schema of this test).
            assert conn.execute(text("SHOW search_path")).scalar() != '"$user", public'
