"""PostgreSQL: trigram indexes for `--grep` on the output text and the path

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02 00:00:00
"""

from collections.abc import Sequence

from alembic import op

from ssetape.storage.trigram import trigram_schema

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# `--grep` is a substring LIKE on both columns: without these, a word no exchange holds read
# every exchange (1.6 s a million); with them PostgreSQL reads the few that hold its
# trigrams, and for a common word still walks the newest first (BENCHMARKS.md).
INDEXES = {"ix_exchanges_output_text_trgm": "output_text", "ix_exchanges_path_trgm": "path"}


def upgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name != "postgresql":
        return  # SQLite's LIKE is matched by a scan (an index would need FTS5 and triggers)
    # Not installed (Debian: postgresql-contrib) or not allowed to this role: `--grep` then
    # reads every exchange, as before; everything else is unchanged.
    home = trigram_schema(conn)
    if home is None:
        return
    for name, column in INDEXES.items():
        # Seconds per hundred thousand exchanges (115 s for a million long outputs).
        op.execute(f"CREATE INDEX {name} ON exchanges USING gin ({column} {home}.gin_trgm_ops)")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for name in INDEXES:
        op.execute(f"DROP INDEX IF EXISTS {name}")
