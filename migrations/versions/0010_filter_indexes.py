"""indexes for the list's filters on a host and on a model prefix

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02 00:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# PostgreSQL only: a prefix LIKE can use a plain b-tree only under the C collation; with
# this operator class it can under any. (SQLite cannot use one for its LIKE, which ignores
# ASCII case; a range would, but then sorts every match of a common prefix: left for now.)
MODEL_PREFIX = "ix_exchanges_model_prefix"


def upgrade() -> None:
    # A million exchanges take seconds (an index on three short columns), while writers wait.
    op.create_index("ix_exchanges_host_started_at", "exchanges", ["host", "started_at", "id"])
    if op.get_bind().dialect.name == "postgresql":
        op.create_index(
            MODEL_PREFIX, "exchanges", ["model"], postgresql_ops={"model": "varchar_pattern_ops"}
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.drop_index(MODEL_PREFIX, table_name="exchanges")
    op.drop_index("ix_exchanges_host_started_at", table_name="exchanges")
