"""PostgreSQL's events without the foreign key to exchanges: each row's check cost the server
more than its insert

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02 00:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FK = "fk_events_exchange_id_exchanges"


def upgrade() -> None:
    # Why: the check is a trigger per inserted row (a lookup in exchanges' key, and a row
    # lock): 4 of the 11 µs of server CPU an event cost on day partitions (BENCHMARKS.md).
    # Nothing needs it: a writer inserts events only under an exchange id it inserted or
    # read in the same transaction, and prune deletes an exchange's events itself, before
    # the exchange (or drops their day's partition). SQLite keeps its check: there it
    # costs no server, and its writer is not where SQLite's limit is.
    if op.get_bind().dialect.name != "postgresql":
        return
    # In the writers' order (exchanges, then events), each as strong as the drop needs.
    op.execute("LOCK TABLE exchanges IN SHARE ROW EXCLUSIVE MODE")
    op.execute("LOCK TABLE events IN ACCESS EXCLUSIVE MODE")
    # On the partitioned parent: each partition's copy of it goes too.
    op.execute(f"ALTER TABLE events DROP CONSTRAINT {FK}")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("LOCK TABLE exchanges IN SHARE ROW EXCLUSIVE MODE")
    op.execute("LOCK TABLE events IN ACCESS EXCLUSIVE MODE")
    # Rows of exchanges that are gone (a write racing a prune) would fail the check.
    op.execute(
        "DELETE FROM events e "
        "WHERE NOT EXISTS (SELECT 1 FROM exchanges x WHERE x.id = e.exchange_id)"
    )
    op.execute(
        f"ALTER TABLE events ADD CONSTRAINT {FK} FOREIGN KEY (exchange_id) "
        "REFERENCES exchanges (id) ON DELETE CASCADE"
    )
