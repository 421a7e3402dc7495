"""sessions: the run, test or user flow an exchange belongs to

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 00:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable, so SQLite adds it in place; older exchanges belong to no session.
    op.add_column("exchanges", sa.Column("session", sa.String(200), nullable=True))
    op.create_index("ix_exchanges_session", "exchanges", ["session"])


def downgrade() -> None:
    op.drop_index("ix_exchanges_session", table_name="exchanges")
    with op.batch_alter_table("exchanges") as batch:
        batch.drop_column("session")
