"""who failed (provider, client, network, ssetape) and the request's text, for search

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06 00:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from ssetape.storage.text_index import COLUMNS_0012, TextIndex
from ssetape.storage.trigram import trigram_schema

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# `--grep` searches the request's text too: indexed as 0011 indexes the output text.
PROMPT_INDEX = "ix_exchanges_request_text_trgm"


def upgrade() -> None:
    # Nullable, so SQLite adds them in place (no rebuild of exchanges, whose text-index
    # triggers a rebuild would drop); `ssetape reindex` fills the rows stored before.
    op.add_column("exchanges", sa.Column("fault", sa.String(length=16), nullable=True))
    op.create_index("ix_exchanges_fault", "exchanges", ["fault"])
    op.add_column("exchanges", sa.Column("request_text", sa.Text(), nullable=True))
    _index_request_text()
    # The instance a run belongs to (`ssetape record --name`, else HOST:PORT).
    op.add_column("recorder_runs", sa.Column("name", sa.String(length=255), nullable=True))


def _index_request_text() -> None:
    conn = op.get_bind()
    if conn.dialect.name == "sqlite":
        # FTS5 indexes a table's columns as it was made: the table is made anew with the
        # third column and rebuilt (a minute or so a million exchanges, BENCHMARKS.md). A
        # SQLite without FTS5 can drop the triggers but not the table, nor make one: the
        # store opens without the index, as before (storage/text_index.py).
        if TextIndex.drop(conn):
            TextIndex.create(conn)
        return
    home = trigram_schema(conn)
    if home is None:  # as in 0011: `--grep` reads every exchange; nothing else changes
        return
    # Quick: the column is empty until `ssetape reindex` fills it (the index then grows
    # with it).
    op.execute(
        f"CREATE INDEX {PROMPT_INDEX} ON exchanges USING gin (request_text {home}.gin_trgm_ops)"
    )


def downgrade() -> None:
    with op.batch_alter_table("recorder_runs") as runs:
        runs.drop_column("name")
    conn = op.get_bind()
    sqlite = conn.dialect.name == "sqlite"
    if sqlite:
        TextIndex.drop(conn)
    else:
        op.execute(f"DROP INDEX IF EXISTS {PROMPT_INDEX}")
    op.drop_index("ix_exchanges_fault", table_name="exchanges")
    with op.batch_alter_table("exchanges") as batch:
        batch.drop_column("request_text")
        batch.drop_column("fault")
    if sqlite:
        # After the batch's rebuild of exchanges (which drops triggers): 0012's index.
        TextIndex.create(conn, COLUMNS_0012)
