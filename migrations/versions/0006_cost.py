"""cost: each exchange's price at the rates of its day, and the price data it came from

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 00:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COLUMNS = ("cost_nusd", "price_provider", "price_model", "price_note", "price_data")


def upgrade() -> None:
    # All nullable, so SQLite adds them in place; `ssetape reindex` prices older exchanges.
    # Nano-dollars in an integer: sums in SQL are exact, where floats would drift.
    op.add_column("exchanges", sa.Column("cost_nusd", sa.BigInteger(), nullable=True))
    op.add_column("exchanges", sa.Column("price_provider", sa.String(64), nullable=True))
    op.add_column("exchanges", sa.Column("price_model", sa.String(200), nullable=True))
    op.add_column("exchanges", sa.Column("price_note", sa.Text(), nullable=True))
    op.add_column("exchanges", sa.Column("price_data", sa.String(100), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("exchanges") as batch:
        for name in _COLUMNS:
            batch.drop_column(name)
