"""SQLAlchemy models of the ssetape store.

The table and column names are a contract: the recorder, the replayer, the CLI
and the hand-written migrations in ``ssetape.migrations`` all depend on them.
Change them only together with a new migration.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
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


def no_nul(value: Any) -> Any:
    """PostgreSQL text cannot hold NUL (nor can its jsonb, even as the escape ``\\u0000``): U+FFFD
    stands in for it, in strings at any depth of a JSON value too. The exact bytes of every
    event stay in ``raw`` (bytea), which replay and export use."""
    if isinstance(value, str):
        return value.replace("\0", "\ufffd") if "\0" in value else value
    if isinstance(value, list | tuple):
        return [no_nul(v) for v in value]
    if isinstance(value, dict):
        return {no_nul(k): no_nul(v) for k, v in value.items()}
    return value


class _NoNul(TypeDecorator[Any]):
    """The one place text reaches PostgreSQL through SQLAlchemy: every text and JSON column is
    of a subclass, so the writer's batches, the analysis (live and `reindex`) and imports all
    store a NUL as U+FFFD instead of failing the whole transaction. SQLite keeps NUL as is."""

    impl: Any = Text
    cache_ok = True

    def bind_processor(self, dialect: Dialect) -> Any:
        # Per dialect, once: SQLite pays nothing per value. ``impl_instance`` is the
        # dialect's own type here (SQLAlchemy copies the decorator per dialect).
        inner = self.impl_instance.bind_processor(dialect)
        if dialect.name != "postgresql":
            return inner
        if inner is None:
            return no_nul
        return lambda value: inner(no_nul(value))


class Str(_NoNul):
    impl = String
    cache_ok = True  # SQLAlchemy asks each subclass


class LongText(_NoNul):
    impl = Text
    cache_ok = True  # SQLAlchemy asks each subclass


class Json(_NoNul):
    impl = JSON
    cache_ok = True  # SQLAlchemy asks each subclass

    @property
    def should_evaluate_none(self) -> bool:  # type: ignore[override]
        # As the JSON it wraps: with none_as_null, None is SQL NULL, not the text 'null'.
        return bool(self.impl_instance.should_evaluate_none)


# One past the largest count a Count column holds.
COUNT_END = 2**31


class Count(TypeDecorator[int]):
    """A count an upstream reports (tokens): one past what the column holds (PostgreSQL's
    INTEGER is 32-bit) is stored as unknown, NULL, on every backend, rather than failing the
    transaction that stores the analyses of a whole batch of exchanges."""

    impl = Integer
    cache_ok = True

    def process_bind_param(self, value: int | None, dialect: Dialect) -> int | None:
        return value if value is None or -COUNT_END <= value < COUNT_END else None


class Wide(TypeDecorator[int]):
    """A derived 64-bit figure (a cost in nano-dollars, a time in microseconds): one past
    what BIGINT holds is stored as unknown, NULL, as :class:`Count` does, rather than failing
    the transaction of a whole batch (SQLite's OverflowError, PostgreSQL's "bigint out of
    range")."""

    impl = BigInteger
    cache_ok = True

    def process_bind_param(self, value: int | None, dialect: Dialect) -> int | None:
        return value if value is None or -(2**63) <= value < 2**63 else None


class Finite(TypeDecorator[float]):
    """A derived float (tokens/s): infinity or NaN is stored as unknown, NULL, on every
    backend (PostgreSQL would keep them, and JSON cannot say them)."""

    impl = Float
    cache_ok = True

    def process_bind_param(self, value: float | None, dialect: Dialect) -> float | None:
        return value if value is None or math.isfinite(value) else None


def backend_only(dialect: str, type_: str, name: str | None, table: str | None) -> bool:
    """Whether a schema object is one the migrations give a single backend on purpose, so it
    is in no model: PostgreSQL's day partitions of events (and their key, ``events.day``,
    migration 0008) and its prefix and trigram indexes (0010, 0011); SQLite's full-text
    index tables (0012) and the events foreign key it kept (0009 dropped PostgreSQL's).
    Alembic's comparison skips these (migrations/env.py, tests/storage/test_schema.py)."""
    if dialect == "postgresql":
        if type_ == "table":
            return name is not None and name.startswith("events_")
        if type_ == "column":
            return (table, name) == ("events", "day")
        return type_ == "index" and name in _POSTGRESQL_INDEXES
    if dialect == "sqlite":
        if type_ == "table":
            return name is not None and name.startswith("exchanges_text")
        return type_ == "foreign_key_constraint" and name == "fk_events_exchange_id_exchanges"
    return False


def include_object(dialect: str) -> Any:
    """Alembic's ``include_object`` filter for ``dialect``: leaves out what
    :func:`backend_only` names."""

    def include(obj: Any, name: str | None, type_: str, reflected: bool, other: Any) -> bool:
        table = getattr(getattr(obj, "table", None), "name", None)
        return not backend_only(dialect, type_, name, table)

    return include


_POSTGRESQL_INDEXES = frozenset(
    {
        "ix_exchanges_model_prefix",
        "ix_exchanges_output_text_trgm",
        "ix_exchanges_path_trgm",
        "ix_exchanges_request_text_trgm",
    }
)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: dict[Any, Any] = {  # noqa: RUF012 - SQLAlchemy reads it as a class attribute
        dt.datetime: UTCDateTime(),
        bytes: LargeBinary(),
    }


_TIMINGS = ("duration_us", "ttfb_us", "ttft_us", "gap_max_us")


class Exchange(Base):
    """One HTTP request/response pair that went through the proxy."""

    __tablename__ = "exchanges"
    # `list --host` pages through one host newest first by a range of this index alone; on
    # the started_at index an absent host walked every exchange (0.6-1.2 s a million:
    # BENCHMARKS.md).
    # `list --sort -duration` (and ttfb, ttft, gap) pages by (value, id) along these, and
    # their range filters (--min-ttft 2s) read them too (migration 0014).
    __table_args__ = (
        Index("ix_exchanges_host_started_at", "host", "started_at", "id"),
        *(Index(f"ix_exchanges_{c}_id", c, "id") for c in _TIMINGS),
    )

    id: Mapped[int] = mapped_column(_Id, primary_key=True, autoincrement=True)
    uid: Mapped[str] = mapped_column(Str(32), unique=True)
    # Offset zero for every event offset: the moment the proxy had the whole request.
    started_at: Mapped[dt.datetime] = mapped_column(index=True)
    method: Mapped[str] = mapped_column(Str)
    scheme: Mapped[str] = mapped_column(Str)
    host: Mapped[str] = mapped_column(Str)
    port: Mapped[int] = mapped_column(Integer)
    path: Mapped[str] = mapped_column(LongText)
    query: Mapped[str] = mapped_column(LongText, default="")
    http_version: Mapped[str] = mapped_column(Str)
    request_headers: Mapped[list[list[str]]] = mapped_column(Json)
    request_body: Mapped[bytes | None] = mapped_column(LargeBinary)
    fingerprint: Mapped[str] = mapped_column(Str(64), index=True)
    status: Mapped[int | None] = mapped_column(Integer)
    reason: Mapped[str | None] = mapped_column(Str)
    # none_as_null: "no response yet" must be SQL NULL, not the JSON text 'null'.
    response_headers: Mapped[list[list[str]] | None] = mapped_column(Json(none_as_null=True))
    response_body: Mapped[bytes | None] = mapped_column(LargeBinary)
    is_stream: Mapped[bool] = mapped_column(default=False)
    state: Mapped[str] = mapped_column(Str(32), index=True, default=ExchangeState.RECORDING.value)
    error: Mapped[str | None] = mapped_column(LongText)
    ttfb_us: Mapped[int | None] = mapped_column(BigInteger)
    duration_us: Mapped[int | None] = mapped_column(BigInteger)
    event_count: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    recorder: Mapped[str | None] = mapped_column(Str, index=True)
    # The first event seq the recording misses (the proxy or the store dropped it, or the
    # store file went away): replay stops there unless told to serve the gaps. Migration 0003.
    gap_seq: Mapped[int | None] = mapped_column(Integer)
    # The run, test or user flow the exchange belongs to (x-ssetape-session, or the recorder's
    # ssetape_session), at most vocabulary.MAX_SESSION characters. Migration 0005.
    session: Mapped[str | None] = mapped_column(Str(200), index=True)

    # Stream knowledge (migration 0002), derived by ssetape.analysis.knowledge from the
    # events; all NULL until analysed (`ssetape reindex` fills old rows).
    api: Mapped[str | None] = mapped_column(Str(32), index=True)
    model: Mapped[str | None] = mapped_column(Str, index=True)
    outcome: Mapped[str | None] = mapped_column(Str(32), index=True)
    outcome_reason: Mapped[str | None] = mapped_column(LongText)
    # Who failed, beside the outcome (vocabulary.Fault): the provider, the client, the network
    # or ssetape itself; NULL for an exchange that did not fail. Migration 0015.
    fault: Mapped[str | None] = mapped_column(Str(16), index=True)
    input_tokens: Mapped[int | None] = mapped_column(Count)
    output_tokens: Mapped[int | None] = mapped_column(Count)
    total_tokens: Mapped[int | None] = mapped_column(Count)
    # Parts of the counts as the provider reports them, and the provider profile the stream
    # was read under (migration 0004).
    cache_read_tokens: Mapped[int | None] = mapped_column(Count)
    cache_write_tokens: Mapped[int | None] = mapped_column(Count)
    reasoning_tokens: Mapped[int | None] = mapped_column(Count)
    profile: Mapped[str | None] = mapped_column(Str(32))
    ttft_us: Mapped[int | None] = mapped_column(Wide)
    gap_median_us: Mapped[int | None] = mapped_column(Wide)
    gap_p95_us: Mapped[int | None] = mapped_column(Wide)
    gap_max_us: Mapped[int | None] = mapped_column(Wide)
    tokens_per_s: Mapped[float | None] = mapped_column(Finite)
    output_text: Mapped[str | None] = mapped_column(LongText)
    # The request's prompt text (messages, input, contents, system) from the redacted body
    # as stored, for search by prompt. Migration 0015.
    request_text: Mapped[str | None] = mapped_column(LongText)
    # refusal_text, reasoning_text, tool_calls: shown, rarely filtered on.
    details: Mapped[dict[str, Any] | None] = mapped_column(Json(none_as_null=True))
    analysis_version: Mapped[int | None] = mapped_column(Integer)
    # Price (migration 0006), from ssetape.cost at the rates in force at started_at: USD
    # billionths (exact sums), the genai-prices provider and model it matched, why there is
    # no price (or what it leaves out), and the price data used ("genai-prices 0.2.3").
    cost_nusd: Mapped[int | None] = mapped_column(Wide)
    price_provider: Mapped[str | None] = mapped_column(Str(64))
    price_model: Mapped[str | None] = mapped_column(Str(200))
    price_note: Mapped[str | None] = mapped_column(LongText)
    price_data: Mapped[str | None] = mapped_column(Str(100))
    # Set by `ssetape prune --events-only`: the summary above stays, the events are gone (and
    # replay does not serve the exchange).
    events_pruned_at: Mapped[dt.datetime | None] = mapped_column()
    # A response body over ssetape_max_response_body (migration 0013): its whole size and
    # SHA-256, and response_body holds only its first bytes; replay refuses the exchange.
    # NULL: the body (if any) is stored whole.
    response_body_bytes: Mapped[int | None] = mapped_column(BigInteger)
    response_body_sha256: Mapped[str | None] = mapped_column(Str(64))
    transport: Mapped[str | None] = mapped_column(Str(16))  # vocabulary.Transport (0016)

    # No foreign key under events (migration 0009: PostgreSQL's check per row cost more than
    # the insert), so the ORM deletes an exchange's events itself rather than trusting the
    # database to; `prune` deletes them in bulk before the exchange, as anyone deleting by
    # hand must.
    events: Mapped[list[Event]] = relationship(
        back_populates="exchange",
        order_by="Event.seq",
        primaryjoin="Exchange.id == foreign(Event.exchange_id)",
        cascade="all, delete-orphan",
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

    exchange_id: Mapped[int] = mapped_column(_Id, primary_key=True, autoincrement=False)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    offset_us: Mapped[int] = mapped_column(BigInteger)
    event: Mapped[str | None] = mapped_column(Str)
    data: Mapped[str | None] = mapped_column(LongText)
    sse_id: Mapped[str | None] = mapped_column(Str)
    # Exact bytes including comment lines, so replayed bodies are byte-identical.
    raw: Mapped[bytes] = mapped_column(LargeBinary)
    direction: Mapped[str | None] = mapped_column(Str)  # a WebSocket message's (0016), else NULL
    opcode: Mapped[str | None] = mapped_column(Str)  # vocabulary.Opcode, as direction

    exchange: Mapped[Exchange] = relationship(
        back_populates="events", primaryjoin="Exchange.id == foreign(Event.exchange_id)"
    )

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

    key: Mapped[str] = mapped_column(Str(255), primary_key=True)
    value: Mapped[str] = mapped_column(LongText)

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
    code: Mapped[str] = mapped_column(Str(64), index=True)
    event_seq: Mapped[int | None] = mapped_column(Integer)
    detail: Mapped[str] = mapped_column(LongText)

    exchange: Mapped[Exchange] = relationship(back_populates="findings")

    def __repr__(self) -> str:
        return (
            f"Finding(exchange_id={self.exchange_id!r}, code={self.code!r}, seq={self.event_seq!r})"
        )


class RecorderRun(Base):
    """One recorder process's counters, so losses stay visible after it exits."""

    __tablename__ = "recorder_runs"

    recorder: Mapped[str] = mapped_column(Str(255), primary_key=True)
    started_at: Mapped[dt.datetime]
    updated_at: Mapped[dt.datetime]
    stopped_at: Mapped[dt.datetime | None]
    exchanges_recorded: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    events_recorded: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    exchanges_lost: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    events_lost: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    store_errors: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    last_error: Mapped[str | None] = mapped_column(LongText)
    # The instance it belongs to (`ssetape record --name`, else HOST:PORT). Migration 0015.
    name: Mapped[str | None] = mapped_column(Str(255))

    def __repr__(self) -> str:
        return f"RecorderRun(recorder={self.recorder!r}, events_lost={self.events_lost!r})"
