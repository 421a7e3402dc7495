"""No secret in any PostgreSQL table or the recorder's log (the SQLite twin of this test is
test_recorder_secrets.py): every column of every row is scanned, bytea as raw bytes."""

from __future__ import annotations

from collections.abc import Iterator

from sqlalchemy import create_engine, inspect, text

from ssetape.simulator.simulator import Simulator
from tests.addons.stores import Recorders, pg_schema
from tests.addons.test_recorder_secrets import (
    ANTHROPIC_KEY,
    AZURE_KEY,
    BODY_SECRET,
    COOKIE,
    OPENAI_KEY,
    session_with_secrets,
)

SECRETS = [OPENAI_KEY, ANTHROPIC_KEY, AZURE_KEY, BODY_SECRET, COOKIE.partition("=")[2]]


def everything_stored(url: str) -> Iterator[tuple[str, bytes]]:
    """(table, value) for every non-NULL value in the schema, bytes as they are stored."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            for table in inspect(conn).get_table_names():
                for row in conn.execute(text(f'SELECT * FROM "{table}"')):
                    for value in row:
                        if value is None:
                            continue
                        yield table, value if isinstance(value, bytes) else str(value).encode()
    finally:
        engine.dispose()


def test_no_key_in_postgresql_tables_or_log(sim: Simulator, recorders: Recorders) -> None:
    with pg_schema() as url:
        proc = recorders.start(
            url, "--mode", f"reverse:{sim.url}", "--redact-field", "metadata.user_token"
        )
        session_with_secrets(proc.url)
        assert proc.stop() == 0, proc.log.decode()

        stored = list(everything_stored(url))
        tables = {t for t, _ in stored}
        assert {"exchanges", "events", "recorder_runs", "settings"} <= tables
        assert any(b"visible" in v for t, v in stored if t == "exchanges")  # the scan sees bodies
        for secret in SECRETS:
            assert not [t for t, v in stored if secret.encode() in v], secret
            assert secret.encode() not in proc.log
