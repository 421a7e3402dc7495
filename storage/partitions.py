"""PostgreSQL's events in day partitions: made ahead by the recorders, dropped whole by prune.

Since migration 0008 a PostgreSQL store keeps ``events`` as a table partitioned by range on
``day``, the UTC date the database server wrote the row (a column default, so no writer sends
it and the ORM never sees it). One partition per day (``events_20261202``), one
``events_legacy`` holding what the store had before it was partitioned, and
``events_default`` for a row whose day has no partition yet: an insert never fails because a
partition is missing.

Why the write day and not the exchange's start: the writer never has to know when an exchange
began (imports of year-old cassettes land in today's partition, not in a year-old one), a
retried batch lands where its first attempt did, and a day's partition only ever holds
exchanges that began before that day ended (an exchange's row is written before its events),
which is what lets prune drop it whole (see ``ssetape.storage.prune``).

Each writer makes today's and tomorrow's partitions when it starts and again when the date
changes, so tomorrow's exists long before midnight wherever a recorder runs. Making one takes
a brief exclusive lock on ``events`` (PostgreSQL 15), so it waits at most ``LOCK_WAIT`` and
is tried again at the next batch; meanwhile rows go to ``events_default``.
SQLite stores are not partitioned: every method here is a no-op on them.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import time
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, text

from ssetape.storage.engine import one_line

__all__ = [
    "CLOSED_AFTER", "DEFAULT", "DETACH_TRIES", "LEGACY", "LOCK_WAIT", "DayPartitions",
    "Partition", "detach", "leftovers", "partition_name",
]  # fmt: skip

log = logging.getLogger("ssetape.storage")

TABLE = "events"
DEFAULT = "events_default"
LEGACY = "events_legacy"
LOCK_WAIT = "2s"  # a partition made (or dropped) waits this long for writers' transactions
# A detach waits this long for each lock (less than PostgreSQL's deadlock_timeout, 1 s, so
# that it gives up before the deadlock detector could pick a writer), this many times.
DETACH_WAIT_MS = 300
DETACH_TRIES = 20
_PRUNING = "_pruning"  # the suffix of a partition detached to be dropped
# A day's partition takes no more rows this long after the day ended (by the server's clock):
# a writer's transaction begun before midnight writes the day before until it commits.
CLOSED_AFTER = dt.timedelta(minutes=10)
_RETRY = 60.0  # seconds before a failed make is tried again
# pg_advisory_xact_lock key: recorders making the same partition at once take turns.
_LOCK_KEY = 0x5353_4554_4150_0002
_BOUND = re.compile(
    r"FROM \((MINVALUE|'(\d{4}-\d\d-\d\d)')\) TO \((MAXVALUE|'(\d{4}-\d\d-\d\d)')\)"
)


def partition_name(day: dt.date) -> str:
    return f"{TABLE}_{day:%Y%m%d}"


@dataclass(frozen=True, slots=True)
class Partition:
    """One partition of ``events`` and the days it takes: [lower, upper), None unbounded."""

    name: str
    lower: dt.date | None
    upper: dt.date | None
    default: bool = False

    @property
    def ends_at(self) -> dt.datetime | None:
        """When the last day it takes ends (UTC); None for the default partition."""
        if self.default or self.upper is None:
            return None
        return dt.datetime.combine(self.upper, dt.time(), dt.UTC)


def is_partitioned(conn: Connection) -> bool:
    if conn.dialect.name != "postgresql":
        return False
    found = conn.execute(
        text("SELECT c.relkind FROM pg_class c WHERE c.oid = to_regclass(:t)"), {"t": TABLE}
    ).scalar()
    return found == "p"


def partitions(conn: Connection) -> list[Partition]:
    """The partitions of ``events``, oldest first (the default one last); [] if it has none."""
    if not is_partitioned(conn):
        return []
    rows = conn.execute(
        text(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = to_regclass(:t)"
        ),
        {"t": TABLE},
    )
    found: list[Partition] = []
    for name, bound in rows:
        m = _BOUND.search(bound or "")
        if m is None:  # "DEFAULT"
            found.append(Partition(name, None, None, default=True))
            continue
        lower = dt.date.fromisoformat(m.group(2)) if m.group(2) else None
        upper = dt.date.fromisoformat(m.group(4)) if m.group(4) else None
        found.append(Partition(name, lower, upper))
    return sorted(found, key=lambda p: (p.default, p.lower or dt.date.min))


def make(conn: Connection, day: dt.date) -> bool:
    """Make ``day``'s partition in the caller's transaction unless one takes it already;
    whether it exists now. False when the default partition holds rows of that day already
    (they stay there, and so do that day's later rows)."""
    conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _LOCK_KEY})
    if any(not p.default and (p.lower or dt.date.min) <= day < (p.upper or dt.date.max)
           for p in partitions(conn)):  # fmt: skip
        return True
    stray = conn.execute(text(f"SELECT 1 FROM {DEFAULT} WHERE day = :d LIMIT 1"), {"d": day})
    if stray.first() is not None:
        return False
    conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{LOCK_WAIT}'")
    conn.exec_driver_sql(
        f"CREATE TABLE {partition_name(day)} PARTITION OF {TABLE} "
        f"FOR VALUES FROM ('{day.isoformat()}') TO ('{(day + dt.timedelta(days=1)).isoformat()}')"
    )
    return True


def detach(conn: Connection, name: str) -> str:
    """Take partition ``name`` out of ``events`` in the caller's transaction, renamed for
    dropping; its new name. Its files are freed by a DROP after this commits, which then
    holds no lock writers need (a DROP of a partition would hold ``events`` until its files
    are freed: seconds for gigabytes where the file system discards on delete)."""
    gone = f"{name}{_PRUNING}"
    # Only events: since migration 0009 no foreign key ties exchanges to it. Waited for
    # briefly, so that writers queued behind it wait no longer than that; the caller tries
    # again (see DETACH_TRIES), and writers are never the ones to fail.
    conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{DETACH_WAIT_MS}ms'")
    conn.exec_driver_sql(f"LOCK TABLE {TABLE} IN ACCESS EXCLUSIVE MODE")
    conn.exec_driver_sql(f"ALTER TABLE {TABLE} DETACH PARTITION {name}")
    conn.exec_driver_sql(f"ALTER TABLE {name} RENAME TO {gone}")
    return gone


def leftovers(conn: Connection) -> list[str]:
    """Partitions detached for dropping by a prune that stopped before the DROP."""
    if conn.dialect.name != "postgresql":
        return []
    found = conn.execute(
        text(
            "SELECT relname FROM pg_class WHERE relkind = 'r' "
            "AND relnamespace = current_schema()::regnamespace AND relname LIKE :pattern"
        ),
        {"pattern": f"{TABLE}\\_%{_PRUNING}"},
    )
    return sorted(found.scalars())


class DayPartitions:
    """A writer's partitions ahead: :meth:`ahead` before each batch costs one date check."""

    def __init__(self, engine: Engine, *, is_sqlite: bool) -> None:
        self._engine = engine
        self._done: dt.date | None = None if not is_sqlite else dt.date.max
        self._retry_at = 0.0

    def ahead(self) -> None:
        """Today's and tomorrow's partitions, made once a day (never raises: until they are
        made, rows go to the default partition)."""
        today = dt.datetime.now(dt.UTC).date()
        if self._done is not None and self._done >= today:
            return
        if time.monotonic() < self._retry_at:
            return
        try:
            with self._engine.begin() as conn:
                if not is_partitioned(conn):
                    self._done = dt.date.max  # an older schema: nothing to make, ever
                    return
            for day in (today, today + dt.timedelta(days=1)):
                with self._engine.begin() as conn:
                    if not make(conn, day):
                        log.warning(
                            f"ssetape storage: {DEFAULT} holds rows of {day}: they stay "
                            "there (prune deletes them by exchange)"
                        )
            self._done = today
        except Exception as exc:  # the writer's batch goes on: it must not fail here
            self._retry_at = time.monotonic() + _RETRY
            log.warning(
                f"ssetape storage: cannot make the events partitions of {today} and the day "
                f"after (tried again in {_RETRY:.0f} s; rows go to {DEFAULT}): {one_line(exc)}"
            )
