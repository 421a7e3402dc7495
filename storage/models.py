"""SQLAlchemy models of the ssetape store.

The table and column names are a contract: the recorder, the replayer, the CLI
and the hand-written migrations in ``ssetape.migrations`` all depend on them.
Change them only together with a new migration.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    TypeDecorator,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from ssetape.vocabulary import ExchangeState

# Explicit constraint names keep Alembic batch migrations on SQLite (which
# recreate tables) and PostgreSQL in step with each other.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# SQLite only auto-increments a column declared exactly INTEGER PRIMARY KEY;
# PostgreSQL gets 64-bit ids because an audit store may outlive 2**31 exchanges.
_Id = BigInteger().with_variant(Integer(), "sqlite")


class UTCDateTime(TypeDecorator[dt.datetime]):
    """Timezone-aware UTC datetimes on every backend.

    SQLite has no timezone-aware type: SQLAlchemy stores the wall-clock fields
    and returns naive values. Normalising to UTC on the way in keeps the stored
    text sortable, and re-attaching UTC on the way out gives callers the same
    aware values PostgreSQL returns.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            # A naive value is taken as UTC rather than local time: the
            # recorder always works in UTC, and guessing local would shift data.
            return value.replace(tzinfo=dt.UTC)
        return value.astimezone(dt.UTC)

    def process_result_value(
        self, value: dt.datetime | None, dialect: Dialect
    ) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=dt.UTC)
        return value.astimezone(dt.UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: dict[Any, Any] = {  # noqa: RUF012 - SQLAlchemy reads it as a class attribute
        dt.datetime: UTCDateTime(),
        bytes: LargeBinary(),
    }


class Exchange(Base):
    """One HTTP request/response pair that went through the proxy."""

    __tablename__ = "exchanges"

    id: Mapped[int] = mapped_column(_Id, primary_key=True, autoincrement=True)
    uid: Mapped[str] = mapped_column(String(32), unique=True)
    # Offset zero for every event offset: the moment the proxy had the whole request.
    started_at: Mapped[dt.datetime] = mapped_column(index=True)
    method: Mapped[str] = mapped_column(String)
    scheme: Mapped[str] = mapped_column(String)
    host: Mapped[str] = mapped_column(String)
    port: Mapped[int] = mapped_column(Integer)
    path: Mapped[str] = mapped_column(Text)
    query: Mapped[str] = mapped_column(Text, default="")
    http_version: Mapped[str] = mapped_column(String)
    request_headers: Mapped[list[list[str]]] = mapped_column(JSON)
    request_body: Mapped[bytes | None] = mapped_column(LargeBinary)
    fingerprint: Mapped[str] = mapped_column(String(64), index=True)
    status: Mapped[int | None] = mapped_column(Integer)
    reason: Mapped[str | None] = mapped_column(String)
    # none_as_null: "no response yet" must be SQL NULL, not the JSON text 'null'.
    response_headers: Mapped[list[list[str]] | None] = mapped_column(JSON(none_as_null=True))
    response_body: Mapped[bytes | None] = mapped_column(LargeBinary)
    is_stream: Mapped[bool] = mapped_column(default=False)
    state: Mapped[str] = mapped_column(
        String(32), index=True, default=ExchangeState.RECORDING.value
    )
    error: Mapped[str | None] = mapped_column(Text)
    ttfb_us: Mapped[int | None] = mapped_column(BigInteger)
    duration_us: Mapped[int | None] = mapped_column(BigInteger)
    event_count: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    recorder: Mapped[str | None] = mapped_column(String, index=True)
    # The first event seq the recording misses (the proxy or the store dropped it, or the
    # store file went away): replay stops there unless told to serve the gaps. Migration 0003.
    gap_seq: Mapped[int | None] = mapped_column(Integer)

    # Stream knowledge (migration 0002), derived by ssetape.analysis.knowledge from the
    # events; all NULL until analysed (`ssetape reindex` fills old rows).
    api: Mapped[str | None] = mapped_column(String(32), index=True)
    model: Mapped[str | None] = mapped_column(String, index=True)
    outcome: Mapped[str | None] = mapped_column(String(32), index=True)
    outcome_reason: Mapped[str | None] = mapped_column(Text)
    input_tokens: Mapped[int | None] = mapped_column(Integer)
    output_tokens: Mapped[int | None] = mapped_column(Integer)
    total_tokens: Mapped[int | None] = mapped_column(Integer)
    # Parts of the counts as the provider reports them, and the provider profile the stream
    # was read under (migration 0004).
    cache_read_tokens: Mapped[int | None] = mapped_column(Integer)
    cache_write_tokens: Mapped[int | None] = mapped_column(Integer)
    reasoning_tokens: Mapped[int | None] = mapped_column(Integer)
    profile: Mapped[str | None] = mapped_column(String(32))
    ttft_us: Mapped[int | None] = mapped_column(BigInteger)
    gap_median_us: Mapped[int | None] = mapped_column(BigInteger)
    gap_p95_us: Mapped[int | None] = mapped_column(BigInteger)
    gap_max_us: Mapped[int | None] = mapped_column(BigInteger)
    tokens_per_s: Mapped[float | None] = mapped_column(Float)
    output_text: Mapped[str | None] = mapped_column(Text)
    # refusal_text, reasoning_text, tool_calls: shown, rarely filtered on.
    details: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))
    analysis_version: Mapped[int | None] = mapped_column(Integer)

    events: Mapped[list[Event]] = relationship(
        back_populates="exchange",
        order_by="Event.seq",
        cascade="all, delete-orphan",
        passive_deletes=True,
    )
    chunks: Mapped[list[Chunk]] = relationship(
        back_populates="exchange",
        order_by="Chunk.seq",
        cascade="all, delete-orphan",
        passive_deletes=True,
    )
    findings: Mapped[list[Finding]] = relationship(
        back_populates="exchange",
        order_by="Finding.n",
        cascade="all, delete-orphan",
        passive_deletes=True,
    )

    def __repr__(self) -> str:
        # Never include headers or bodies: reprs end up in logs.
        return (
            f"Exchange(id={self.id!r}, uid={self.uid!r}, {self.method} "
            f"{self.scheme}://{self.host}:{self.port}{self.path}, state={self.state!r})"
        )


class Event(Base):
    """One SSE event (or non-SSE chunk) of a streamed response, with its arrival time."""

    __tablename__ = "events"

    exchange_id: Mapped[int] = mapped_column(
        _Id, ForeignKey("exchanges.id", ondelete="CASCADE"), primary_key=True, autoincrement=False
    )
    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    offset_us: Mapped[int] = mapped_column(BigInteger)
    event: Mapped[str | None] = mapped_column(String)
    data: Mapped[str | None] = mapped_column(Text)
    sse_id: Mapped[str | None] = mapped_column(String)
    # Exact bytes including comment lines, so replayed bodies are byte-identical.
    raw: Mapped[bytes] = mapped_column(LargeBinary)

    exchange: Mapped[Exchange] = relationship(back_populates="events")

    def __repr__(self) -> str:
        return (
            f"Event(exchange_id={self.exchange_id!r}, seq={self.seq!r}, "
            f"offset_us={self.offset_us!r}, event={self.event!r})"
        )


class Chunk(Base):
    """One wire chunk of a content-encoded stream, kept still compressed for replay."""

    __tablename__ = "chunks"

    exchange_id: Mapped[int] = mapped_column(
        _Id, ForeignKey("exchanges.id", ondelete="CASCADE"), primary_key=True, autoincrement=False
    )
    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    offset_us: Mapped[int] = mapped_column(BigInteger)
    data: Mapped[bytes] = mapped_column(LargeBinary)

    exchange: Mapped[Exchange] = relationship(back_populates="chunks")

    def __repr__(self) -> str:
        return (
            f"Chunk(exchange_id={self.exchange_id!r}, seq={self.seq!r}, "
            f"offset_us={self.offset_us!r}, size={len(self.data)})"
        )


class Setting(Base):
    """Per-store key/value settings (e.g. the random redaction key)."""

    __tablename__ = "settings"

    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    value: Mapped[str] = mapped_column(Text)

    def __repr__(self) -> str:
        # Values can be secrets (the redaction key): keep them out of reprs.
        return f"Setting(key={self.key!r})"


class Finding(Base):
    """A protocol finding about one exchange's stream, with the event that caused it."""

    __tablename__ = "findings"

    exchange_id: Mapped[int] = mapped_column(
        _Id, ForeignKey("exchanges.id", ondelete="CASCADE"), primary_key=True, autoincrement=False
    )
    n: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    code: Mapped[str] = mapped_column(String(64), index=True)
    event_seq: Mapped[int | None] = mapped_column(Integer)
    detail: Mapped[str] = mapped_column(Text)

    exchange: Mapped[Exchange] = relationship(back_populates="findings")

    def __repr__(self) -> str:
        return (
            f"Finding(exchange_id={self.exchange_id!r}, code={self.code!r}, seq={self.event_seq!r})"
        )


class RecorderRun(Base):
    """One recorder process's counters, so losses stay visible after it exits."""

    __tablename__ = "recorder_runs"

    recorder: Mapped[str] = mapped_column(String(255), primary_key=True)
    started_at: Mapped[dt.datetime]
    updated_at: Mapped[dt.datetime]
    stopped_at: Mapped[dt.datetime | None]
    exchanges_recorded: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    events_recorded: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    exchanges_lost: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    events_lost: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    store_errors: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    last_error: Mapped[str | None] = mapped_column(Text)

    def __repr__(self) -> str:
        return f"RecorderRun(recorder={self.recorder!r}, events_lost={self.events_lost!r})"
