"""a response body over ssetape_max_response_body: its size and hash

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-04 00:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable: SQLite adds them in place; NULL means the body is stored whole, as every
    # body was before.
    op.add_column("exchanges", sa.Column("response_body_bytes", sa.BigInteger(), nullable=True))
    op.add_column(
        "exchanges", sa.Column("response_body_sha256", sa.String(length=64), nullable=True)
    )


def downgrade() -> None:
    with op.batch_alter_table("exchanges") as batch:
        batch.drop_column("response_body_sha256")
        batch.drop_column("response_body_bytes")
