"""`ssetape db status`: where a store's schema stands, read before switching binaries, with
nothing changed (every other command migrates a store when it opens it)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import orjson
from sqlalchemy import text

from ssetape.storage.store import SCHEMA_HEAD, Store
from tests.conftest import SSETAPE


def _status(url: str) -> tuple[int, dict[str, object], str]:
    as_json = subprocess.run([SSETAPE, "db", "status", "--db", url, "--json"],
                             capture_output=True, text=True, timeout=60)  # fmt: skip
    human = subprocess.run([SSETAPE, "db", "status", "--db", url],
                           capture_output=True, text=True, timeout=60)  # fmt: skip
    assert as_json.returncode == human.returncode, human.stderr
    return as_json.returncode, orjson.loads(as_json.stdout), human.stdout


def _set_revision(url: str, revision: str) -> None:
    store = Store.open(url, migrate=False)
    try:
        with store.engine.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": revision})
    finally:
        store.close()


def _revision(url: str) -> str:
    store = Store.open(url, migrate=False)
    try:
        with store.engine.connect() as conn:
            return str(conn.execute(text("SELECT version_num FROM alembic_version")).scalar())
    finally:
        store.close()


def test_status_says_current_behind_and_newer_and_changes_nothing(store_url: str) -> None:
    Store.open(store_url).close()
    rc, doc, human = _status(store_url)
    assert (rc, doc["state"], doc["current"], doc["head"]) == (0, "current", [SCHEMA_HEAD],
                                                               SCHEMA_HEAD)  # fmt: skip
    assert doc["pending"] == [] and human.strip().endswith(": current")

    _set_revision(store_url, "0011")
    rc, doc, human = _status(store_url)
    assert (rc, doc["state"]) == (1, "behind")
    pending = [p["revision"] for p in doc["pending"]]  # type: ignore[attr-defined]
    assert pending[0] == "0012" and pending[-1] == SCHEMA_HEAD
    assert "to apply when it next opens: 0012" in human
    assert _revision(store_url) == "0011"  # read, not migrated

    _set_revision(store_url, "9999_future")
    rc, doc, human = _status(store_url)
    assert (rc, doc["state"]) == (3, "newer") and "upgrade ssetape" in human
    assert _revision(store_url) == "9999_future"


def test_status_of_no_store_is_one_line_and_creates_none(tmp_path: Path) -> None:
    missing = tmp_path / "none.db"
    r = subprocess.run([SSETAPE, "db", "status", "--db", str(missing)], capture_output=True,
                       text=True, timeout=60)  # fmt: skip
    assert r.returncode != 0 and "Traceback" not in r.stderr and str(missing) in r.stderr
    assert not missing.exists()
