"""provider profiles and the cache and reasoning parts of token counts

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 00:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COUNTS = ("cache_read_tokens", "cache_write_tokens", "reasoning_tokens")


def upgrade() -> None:
    # Nullable, so SQLite adds them in place; NULL until (re)analysed: `ssetape reindex --stale`
    # fills them, as the analysis version changed with them.
    op.add_column("exchanges", sa.Column("profile", sa.String(32), nullable=True))
    for name in _COUNTS:
        op.add_column("exchanges", sa.Column(name, sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("exchanges") as batch:
        for name in (*_COUNTS, "profile"):
            batch.drop_column(name)
