"""indexes for sorting and filtering the list by a timing: duration, TTFB, TTFT, longest gap

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06 00:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# (value, id): `list --sort -duration` pages by that keyset (storage.sorted_pages), one
# range scan each page, and `--min-ttft 2s` reads a range of it. The NULLs (no TTFT yet, or
# ever) are in the index too: a sorted list reads them, by id, after all the others.
INDEXES = {
    "ix_exchanges_duration_us_id": "duration_us",
    "ix_exchanges_ttfb_us_id": "ttfb_us",
    "ix_exchanges_ttft_us_id": "ttft_us",
    "ix_exchanges_gap_max_us_id": "gap_max_us",
}


def upgrade() -> None:
    # A million exchanges take seconds each (two integers an entry), while writers wait.
    for name, column in INDEXES.items():
        op.create_index(name, "exchanges", [column, "id"])


def downgrade() -> None:
    for name in reversed(INDEXES):
        op.drop_index(name, table_name="exchanges")
