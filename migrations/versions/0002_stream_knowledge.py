"""stream knowledge per exchange, protocol findings, recorder runs

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 00:00:00
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

# Nullable columns only: SQLite adds them with a plain ALTER TABLE, so old
# stores migrate in place without copying their events. NULL means "not
# analysed yet" until `ssetape reindex` fills them.
_KNOWLEDGE: list[tuple[str, sa.types.TypeEngine[Any]]] = [
    ("api", sa.String(32)),
    ("model", sa.String()),
    ("outcome", sa.String(32)),
    ("outcome_reason", sa.Text()),
    ("input_tokens", sa.Integer()),
    ("output_tokens", sa.Integer()),
    ("total_tokens", sa.Integer()),
    ("ttft_us", sa.BigInteger()),
    ("gap_median_us", sa.BigInteger()),
    ("gap_p95_us", sa.BigInteger()),
    ("gap_max_us", sa.BigInteger()),
    ("tokens_per_s", sa.Float()),
    ("output_text", sa.Text()),
    ("details", sa.JSON()),
    ("analysis_version", sa.Integer()),
]
_INDEXED = ("api", "model", "outcome")


def upgrade() -> None:
    for name, type_ in _KNOWLEDGE:
        op.add_column("exchanges", sa.Column(name, type_, nullable=True))
    for name in _INDEXED:
        op.create_index(f"ix_exchanges_{name}", "exchanges", [name])

    op.create_table(
        "findings",
        sa.Column("exchange_id", _ID, nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("code", sa.String(64), nullable=False),
        sa.Column("event_seq", sa.Integer(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["exchange_id"],
            ["exchanges.id"],
            name="fk_findings_exchange_id_exchanges",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("exchange_id", "n", name="pk_findings"),
    )
    op.create_index("ix_findings_code", "findings", ["code"])

    op.create_table(
        "recorder_runs",
        sa.Column("recorder", sa.String(255), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("stopped_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("exchanges_recorded", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("events_recorded", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("exchanges_lost", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("events_lost", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("store_errors", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("recorder", name="pk_recorder_runs"),
    )


def downgrade() -> None:
    op.drop_table("recorder_runs")
    op.drop_index("ix_findings_code", table_name="findings")
    op.drop_table("findings")
    for name in _INDEXED:
        op.drop_index(f"ix_exchanges_{name}", table_name="exchanges")
    with op.batch_alter_table("exchanges") as batch:
        for name, _type in reversed(_KNOWLEDGE):
            batch.drop_column(name)
