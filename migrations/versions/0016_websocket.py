"""WebSocket sessions: an exchange's transport, each message's direction and opcode

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-08 00:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable, so SQLite adds them in place (no rebuild of exchanges and its text-index
    # triggers, nor of events) and PostgreSQL gives them to every day partition of events at
    # once; the rows stored before are HTTP (NULL).
    op.add_column("exchanges", sa.Column("transport", sa.String(length=16), nullable=True))
    op.add_column("events", sa.Column("direction", sa.String(), nullable=True))
    op.add_column("events", sa.Column("opcode", sa.String(), nullable=True))


def downgrade() -> None:
    # In place too (SQLite 3.35+ drops a column itself): a batch would rebuild exchanges and
    # lose its text-index triggers.
    op.drop_column("events", "opcode")
    op.drop_column("events", "direction")
    op.drop_column("exchanges", "transport")
