"""No secret in any PostgreSQL table or the recorder's log (the SQLite twin of this test is
test_recorder_secrets.py): every column of every row is scanned, bytea as raw bytes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anthropic
import openai
import pytest
from sqlalchemy import create_engine, inspect, text

from ssetape.simulator import Simulator
from tests.addons.stores import Recorders, pg_schema
from tests.addons.test_recorder_secrets import (
    ANTHROPIC_KEY,
    AZURE_KEY,
    BODY_SECRET,
    COOKIE,
    OPENAI_KEY,
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


@pytest.fixture
def recorders(tmp_path: Path, confdir: Path) -> Iterator[Recorders]:
    r = Recorders(tmp_path, confdir)
    yield r
    r.stop_all()


def test_no_key_in_postgresql_tables_or_log(sim: Simulator, recorders: Recorders) -> None:
    with pg_schema() as url:
        proc = recorders.start(
            url, "--mode", f"reverse:{sim.url}", "--redact-field", "metadata.user_token"
        )
        client = openai.OpenAI(base_url=proc.url + "/v1", api_key=OPENAI_KEY, max_retries=0)
        list(
            client.chat.completions.create(
                model="sim-chat",
                stream=True,
                messages=[{"role": "user", "content": "hi"}],
                extra_headers={"cookie": COOKIE, "api-key": AZURE_KEY},
                extra_body={"metadata": {"user_token": BODY_SECRET, "keep": "visible"}},
            )
        )
        ant = anthropic.Anthropic(base_url=proc.url, api_key=ANTHROPIC_KEY, max_retries=0)
        list(
            ant.messages.create(
                model="sim-m",
                max_tokens=20,
                stream=True,
                messages=[{"role": "user", "content": "hi"}],
            )
        )
        assert proc.stop() == 0, proc.log.decode()

        stored = list(everything_stored(url))
        tables = {t for t, _ in stored}
        assert {"exchanges", "events", "recorder_runs", "settings"} <= tables
        assert any(b"visible" in v for t, v in stored if t == "exchanges")  # the scan sees bodies
        for secret in SECRETS:
            assert not [t for t, v in stored if secret.encode() in v], secret
            assert secret.encode() not in proc.log
