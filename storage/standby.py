"""Whether a store is read through a PostgreSQL hot standby, and how far behind it is.

Dashboards read from a standby (``--read-db``) so that they never load the primary the
recorders write to; what they show is then as of the standby's last replayed change. The
reader asks the server: ``pg_is_in_recovery()`` says it is a standby, and
``now() - pg_last_xact_replay_timestamp()`` how long ago it replayed the primary's last commit.
That age keeps growing while the primary commits nothing: when the standby has replayed all the
WAL it has received it is caught up, and the age is only how long the primary has been idle.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sqlalchemy import Engine, text
from sqlalchemy.exc import SQLAlchemyError

__all__ = ["StandbyState", "is_standby", "standby_state"]

_QUERY = text(
    "SELECT pg_is_in_recovery(), pg_last_xact_replay_timestamp(), "
    "now() - pg_last_xact_replay_timestamp(), "
    "pg_last_wal_receive_lsn() IS NOT NULL "
    "AND pg_last_wal_receive_lsn() <= pg_last_wal_replay_lsn()"
)


@dataclass(frozen=True, slots=True)
class StandbyState:
    """A standby as read at one moment (the server's clock, the transaction's start)."""

    # When the last replayed transaction committed on the primary; None before any replay.
    last_replay: dt.datetime | None
    # Seconds since then (now() - last_replay); None before any replay.
    replay_lag: float | None
    # Everything the standby has received is replayed: the lag is the primary's idle time.
    caught_up: bool

    def describe(self) -> str:
        """One line for a reader: how current what it shows is."""
        if self.replay_lag is None:
            return "read from a standby that has replayed no transaction yet"
        lag = max(0.0, self.replay_lag)
        if self.caught_up:
            return (
                f"read from a standby, caught up with what it received "
                f"(last change {lag:.1f} s ago)"
            )
        return f"read from a standby, {lag:.1f} s behind the primary"

    def to_json(self) -> dict[str, object]:
        return {
            "standby": True,
            "replay_lag_s": None if self.replay_lag is None else round(self.replay_lag, 3),
            "last_replay": None if self.last_replay is None else self.last_replay.isoformat(),
            "caught_up": self.caught_up,
        }


def standby_state(engine: Engine) -> StandbyState | None:
    """The standby's state, or None on SQLite, on a primary, or if the server will not say
    (an older or unusual server: a reader then shows no lag rather than failing)."""
    if engine.dialect.name != "postgresql":
        return None
    try:
        with engine.connect() as conn:
            row = conn.execute(_QUERY).one()
    except SQLAlchemyError:
        return None
    in_recovery, last, age, caught_up = row
    if not in_recovery:
        return None
    last_replay = last if isinstance(last, dt.datetime) else None
    lag = age.total_seconds() if isinstance(age, dt.timedelta) else None
    return StandbyState(last_replay=last_replay, replay_lag=lag, caught_up=bool(caught_up))


def is_standby(engine: Engine) -> bool:
    """Whether the store is a PostgreSQL server in recovery (a hot standby): nothing can be
    written there. False on SQLite and on a primary."""
    if engine.dialect.name != "postgresql":
        return False
    try:
        with engine.connect() as conn:
            return bool(conn.execute(text("SELECT pg_is_in_recovery()")).scalar())
    except SQLAlchemyError:
        return False
