"""PostgreSQL: events partitioned by the day they were written, converted in place

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02 00:00:00

The events a store holds already are not copied: the old table becomes one partition,
``events_legacy``, taking every day up to the end of the day of the migration (its rows get
that day, a default PostgreSQL stores once, not per row). The only work proportional to the
store is building its new primary key (exchange_id, seq, day), while recorders wait; see
docs/DEPLOYMENT.md for how long that takes. SQLite stores are not partitioned.
"""

import datetime as dt
from collections.abc import Sequence

from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The day a row is written, by the server's clock, in UTC whatever the session's time zone.
DAY_DEFAULT = "((now() AT TIME ZONE 'UTC')::date)"
COLUMNS = (
    "exchange_id BIGINT NOT NULL, seq INTEGER NOT NULL, offset_us BIGINT NOT NULL, "
    "event VARCHAR, data TEXT, sse_id VARCHAR, raw BYTEA NOT NULL"
)
FK = (
    "CONSTRAINT fk_events_exchange_id_exchanges FOREIGN KEY (exchange_id) "
    "REFERENCES exchanges (id) ON DELETE CASCADE"
)


def _day(d: dt.date) -> str:
    return f"'{d.isoformat()}'"


def upgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name != "postgresql":
        return
    today = dt.datetime.now(dt.UTC).date()
    tomorrow = today + dt.timedelta(days=1)
    # Writers (COPY) wait from here to the commit; readers of events too.
    op.execute("LOCK TABLE events IN ACCESS EXCLUSIVE MODE")
    # The new key is one sort of every row: in memory it is about twice as fast as on disk
    # (PostgreSQL's 64 MB default spills a store of millions of events).
    op.execute("SET LOCAL maintenance_work_mem = '256MB'")
    legacy = conn.exec_driver_sql("SELECT EXISTS (SELECT 1 FROM events)").scalar()
    op.execute("ALTER TABLE events RENAME TO events_legacy")
    op.execute("ALTER TABLE events_legacy RENAME CONSTRAINT pk_events TO pk_events_legacy")
    op.execute(
        "ALTER TABLE events_legacy RENAME CONSTRAINT fk_events_exchange_id_exchanges "
        "TO fk_events_legacy_exchange_id_exchanges"
    )
    op.execute(
        f"CREATE TABLE events ({COLUMNS}, day DATE NOT NULL DEFAULT {DAY_DEFAULT}, "
        f"CONSTRAINT pk_events PRIMARY KEY (exchange_id, seq, day), {FK}) "
        "PARTITION BY RANGE (day)"
    )
    if legacy:
        # A constant default: PostgreSQL records it once, no row is rewritten.
        op.execute(f"ALTER TABLE events_legacy ADD COLUMN day DATE NOT NULL DEFAULT {_day(today)}")
        op.execute("ALTER TABLE events_legacy DROP CONSTRAINT pk_events_legacy")
        op.execute(
            "ALTER TABLE events_legacy ADD CONSTRAINT pk_events_legacy "
            "PRIMARY KEY (exchange_id, seq, day)"
        )
        # Its foreign key is the parent's, so attaching it checks no row against exchanges;
        # the partition bound is checked by one scan of the new column, a constant.
        op.execute(
            "ALTER TABLE events ATTACH PARTITION events_legacy "
            f"FOR VALUES FROM (MINVALUE) TO ({_day(tomorrow)})"
        )
        first = tomorrow
    else:
        op.execute("DROP TABLE events_legacy")
        first = today
    day = first
    while day <= tomorrow:
        op.execute(
            f"CREATE TABLE events_{day:%Y%m%d} PARTITION OF events "
            f"FOR VALUES FROM ({_day(day)}) TO ({_day(day + dt.timedelta(days=1))})"
        )
        day += dt.timedelta(days=1)
    op.execute("CREATE TABLE events_default PARTITION OF events DEFAULT")


def downgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name != "postgresql":
        return
    op.execute("LOCK TABLE events IN ACCESS EXCLUSIVE MODE")
    op.execute(f"CREATE TABLE events_plain ({COLUMNS})")
    op.execute(
        "INSERT INTO events_plain SELECT exchange_id, seq, offset_us, event, data, sse_id, raw "
        "FROM events"
    )
    op.execute("DROP TABLE events CASCADE")  # its partitions with it
    op.execute("ALTER TABLE events_plain RENAME TO events")
    op.execute(
        f"ALTER TABLE events ADD CONSTRAINT pk_events PRIMARY KEY (exchange_id, seq), ADD {FK}"
    )
