"""where a recording misses events, and recorders' exchanges found fast

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 00:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable: SQLite adds it in place; NULL means nothing is missing (or an older recorder
    # wrote it, which said so only in `error`).
    op.add_column("exchanges", sa.Column("gap_seq", sa.Integer(), nullable=True))
    # A recording process that died is accounted for by counting its rows.
    op.create_index("ix_exchanges_recorder", "exchanges", ["recorder"])


def downgrade() -> None:
    op.drop_index("ix_exchanges_recorder", table_name="exchanges")
    with op.batch_alter_table("exchanges") as batch:
        batch.drop_column("gap_seq")
