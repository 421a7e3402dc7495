"""SQLite: an FTS5 trigram index for `--grep` on the output text and the path

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03 00:00:00
"""

from collections.abc import Sequence

from alembic import op

from ssetape.storage.text_index import COLUMNS_0012, TABLE, TRIGGERS, TextIndex

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # What 0011 is to PostgreSQL: a word no exchange holds is found missing in milliseconds
    # instead of reading every exchange (storage/text_index.py says how).
    conn = op.get_bind()
    if conn.dialect.name == "sqlite":
        # Its columns then: exchanges has no request_text before 0015.
        TextIndex.create(conn, COLUMNS_0012)


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    for name in TRIGGERS:
        op.execute(f"DROP TRIGGER IF EXISTS {name}")
    op.execute(f"DROP TABLE IF EXISTS {TABLE}")
