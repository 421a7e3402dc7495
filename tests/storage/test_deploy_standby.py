"""docs/deploy/standby-check.sql as documented (issue 40): on a real primary and its hot
standby made with pg_basebackup -R (the fixture of tests/storage/test_standby.py), the
primary's query shows the standby streaming and the standby's shows it receiving, in
recovery. Runs where the standby tests run (SSETAPE_TEST_PG_URL and SSETAPE_TEST_REPLICA)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import create_engine, text

from tests.storage.test_standby import Pair, pair  # noqa: F401 (the fixture)

CHECK = Path(__file__).parents[2] / "docs" / "deploy" / "standby-check.sql"


def statements(where: str) -> list[str]:
    """The statements under the file's "-- On the <where>:" comment."""
    blocks = CHECK.read_text().split("\n\n")
    [block] = [b for b in blocks if b.startswith(f"-- On the {where}:")]
    lines = [line for line in block.splitlines() if not line.startswith("--")]
    return [s.strip() for s in " ".join(lines).split(";") if s.strip()]


def rows(url: str, query: str) -> list[dict[str, object]]:
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(text(query))]
    finally:
        engine.dispose()


def test_the_documented_check_sees_the_standby_streaming(pair: Pair) -> None:  # noqa: F811
    pair.replayed()  # it has caught up once: it streams
    [on_primary] = statements("primary")
    [standby] = rows(pair.primary, on_primary)
    assert standby["state"] == "streaming", standby
    receiver, recovery = statements("standby")
    [got] = rows(pair.standby, receiver)
    assert got["status"] == "streaming", got
    assert rows(pair.standby, recovery) == [{"pg_is_in_recovery": True}]
    # And the primary is not one.
    assert rows(pair.primary, recovery) == [{"pg_is_in_recovery": False}]
