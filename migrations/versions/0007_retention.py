"""retention: exchanges whose events were pruned keep their summary, marked

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 00:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable, so SQLite adds it in place: no exchange recorded so far was pruned.
    op.add_column(
        "exchanges", sa.Column("events_pruned_at", sa.DateTime(timezone=True), nullable=True)
    )


def downgrade() -> None:
    with op.batch_alter_table("exchanges") as batch:
        batch.drop_column("events_pruned_at")
