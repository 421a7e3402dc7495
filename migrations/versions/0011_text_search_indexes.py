"""PostgreSQL: trigram indexes for `--grep` on the output text and the path

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02 00:00:00
"""

import logging
from collections.abc import Sequence

from alembic import op
from sqlalchemy.exc import DBAPIError

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

log = logging.getLogger("ssetape.storage")

# `--grep` is a substring LIKE on both columns: without these, a word no exchange holds read
# every exchange (1.6 s a million); with them PostgreSQL reads the few that hold its
# trigrams, and for a common word still walks the newest first (BENCHMARKS.md).
INDEXES = {"ix_exchanges_output_text_trgm": "output_text", "ix_exchanges_path_trgm": "path"}


def upgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name != "postgresql":
        return  # SQLite's LIKE is matched by a scan (an index would need FTS5 and triggers)
    try:
        with conn.begin_nested():
            # In public, not in the store's schema: an extension is one per database, and a
            # store in a schema of its own (dropped one day) must not take it along.
            conn.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS pg_trgm SCHEMA public")
    except DBAPIError as e:
        # Not installed (Debian: postgresql-contrib) or not allowed to this role: `--grep`
        # then reads every exchange, as before; everything else is unchanged.
        log.warning(
            "ssetape: no pg_trgm extension (%s): --grep reads every exchange; to index it, "
            "see docs/DEPLOYMENT.md (Text search)",
            str(e.orig).splitlines()[0] if e.orig is not None else e,
        )
        return
    # Where it is (installed before, maybe elsewhere), for a search_path that omits it.
    home = conn.exec_driver_sql(
        "SELECT quote_ident(nspname) FROM pg_extension e "
        "JOIN pg_namespace n ON n.oid = e.extnamespace WHERE extname = 'pg_trgm'"
    ).scalar_one()
    for name, column in INDEXES.items():
        # Seconds per hundred thousand exchanges (115 s for a million long outputs).
        op.execute(f"CREATE INDEX {name} ON exchanges USING gin ({column} {home}.gin_trgm_ops)")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for name in INDEXES:
        op.execute(f"DROP INDEX IF EXISTS {name}")
