"""The pipe between the proxy and its recording process: every message and report, once.

Both ends import this module and speak only its typed values; only its codec knows how they
travel.

**Messages**, proxy -> recording process (stdin), one :data:`Message` type each (``uid`` names
one exchange, offsets are integer microseconds from the moment the proxy had the whole
request):

- :class:`Configure`: always the first message; a later one only renames the instance
- :class:`Begin`: the request arrived; :class:`Update`: response headers
- :class:`Stream`: a streamed body begins: how it is cut into events (a ``Framing`` value), the
  bytes one of its events and its decoded body may take (the proxy's options when it began)
- :class:`Chunk`: one relayed chunk, stamped by the proxy
- :class:`Gap`: chunks the proxy did not pass on (the recording process fell behind); ``tail``:
  their last bytes, to find where the next event starts
- :class:`WsMessage`: one WebSocket message of a session (the exchange is its upgrade),
  stamped by the proxy: who sent it (a ``Direction``), its ``Opcode`` and its exact payload
- :class:`Finish`: the exchange ended
- :class:`Lost`: what the proxy itself lost since its last ``Lost``
- :class:`Close`: store what is left and exit

On the pipe: frames of a 4-byte length and a pickled batch of ``(tag, *fields)`` tuples. A
chunk message is made for every relayed chunk: a plain tuple pickles ten times faster than a
named one, so :func:`encode_frame` and :func:`read_frames` turn the values into tuples and
back, and nothing else sees a tag.

If stdin ends without ``Close``, the proxy is gone (killed): everything it sent is still
stored and its exchanges in flight are marked interrupted.

**Reports**, recording process -> proxy (a private copy of stdout): JSON lines, each one
object with one key, a :class:`Report`. Two of them feed the proxy's metrics
(``ssetape.telemetry``): :class:`StoredExchange` (each exchange as the store now holds it) and
:class:`StoreWrites` (the store's transactions and queue, with each ``COUNTS``).

A message or report the other side does not know is logged as an error, never skipped: the
two ends come from one installation, so it can only mean a bug or mismatched versions.
"""

from __future__ import annotations

import dataclasses
import functools
import pickle
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import IO, Any, NamedTuple, cast

import orjson

from ssetape.storage.runs import RunCounts

__all__ = [
    "HEADER",
    "Begin",
    "Chunk",
    "Close",
    "Configure",
    "Counts",
    "FinalCounts",
    "Finish",
    "Gap",
    "Lost",
    "Message",
    "Report",
    "RetentionPolicy",
    "StoreWrites",
    "StoredExchange",
    "Stream",
    "Unknown",
    "Update",
    "WorkerConfig",
    "WsMessage",
    "chunk_of",
    "decode_report",
    "encode_frame",
    "encode_report",
    "read_frames",
]


class Configure(NamedTuple):
    config: WorkerConfig


class Begin(NamedTuple):
    uid: str
    fields: dict[str, Any]


class Update(NamedTuple):
    uid: str
    fields: dict[str, Any]


class Stream(NamedTuple):
    uid: str
    framing: str  # a Framing value
    encoding: str  # its content-encoding, "" if none
    max_event: int
    max_decoded: int


class Chunk(NamedTuple):
    uid: str
    offset_us: int
    data: bytes


# ``chunk_of((uid, offset_us, data))``: the proxy makes one for every relayed chunk, on its
# event loop; a NamedTuple's own constructor, a Python function, costs twice as much.
chunk_of = cast(Callable[[tuple[str, int, bytes]], Chunk], functools.partial(tuple.__new__, Chunk))


class Gap(NamedTuple):
    uid: str
    nbytes: int
    tail: bytes


class WsMessage(NamedTuple):
    uid: str
    offset_us: int
    direction: str  # a Direction value
    opcode: str  # an Opcode value
    data: bytes


class Finish(NamedTuple):
    uid: str
    offset_us: int
    fields: dict[str, Any]


class Lost(NamedTuple):
    exchanges: int
    events: int


class Close(NamedTuple):
    pass


class Unknown(NamedTuple):
    """What :func:`read_frames` makes of a message it has no type for (mismatched
    versions): the recording process logs it."""

    tag: str


Message = (
    Configure | Begin | Update | Stream | Chunk | Gap | WsMessage | Finish | Lost | Close | Unknown
)

# The tags on the pipe, and the types they stand for.
_TAGS: dict[type[Any], str] = {
    Configure: "cfg", Begin: "b", Update: "u", Stream: "s", Chunk: "c", Gap: "g",
    Finish: "f", Lost: "n", Close: "close", WsMessage: "w",
}  # fmt: skip
_TYPES = {tag: (kind, 1 + len(kind._fields)) for kind, tag in _TAGS.items()}

HEADER = struct.Struct(">I")  # each frame: its payload's length, then the pickled batch


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """What the recording process prunes from its store, and how often (the
    ``ssetape_retain*`` options); every span in seconds, None: that prune is off."""

    exchanges: float | None = None  # whole exchanges that started longer ago than this
    events: float | None = None  # only the events and chunks of those (shorter)
    every: float = 3600.0


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    db: str
    max_pending: int  # rows the writer keeps while the store is slow or down
    active: bool  # record from the start (False beside the replayer: only once asked to)
    # Seconds any store operation may take before it counts as failed (and is retried).
    deadline: float = 5.0
    # A genai-prices data.json to price exchanges with; None: the library's own data.
    price_data: str | None = None
    # Pruned on a schedule in a thread of the recording process; None: kept for ever.
    retention: RetentionPolicy | None = None
    # The instance its run rows name (`--name`, else HOST:PORT); None: not known yet.
    name: str | None = None


def encode_frame(batch: list[Message]) -> bytes:
    tags = _TAGS
    payload = pickle.dumps([(tags[type(m)], *m) for m in batch], protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(payload)) + payload


def read_frames(inp: IO[bytes]) -> Iterator[list[Message]]:
    """Message batches from the proxy until its end of the pipe closes."""
    types, new = _TYPES, tuple.__new__
    while True:
        head = inp.read(HEADER.size)
        if len(head) < HEADER.size:
            return
        (size,) = HEADER.unpack(head)
        payload = inp.read(size)
        if len(payload) < size:
            return
        yield [
            new(k[0], t[1:]) if (k := types.get(t[0])) and len(t) == k[1] else Unknown(str(t[0]))
            for t in pickle.loads(payload)
        ]


class Report(StrEnum):
    READY = "ready"  # its recorder id: the store is open, recording works
    LOG = "log"  # [logger name, level, message]: logged by the proxy as its own
    COUNTS = "counts"  # Counts, twice a second: if the process dies, the proxy still knows
    DONE = "done"  # [uid, ...]: exchanges whose finish was just committed (COUNTS follows)
    FINAL = "final"  # FinalCounts, once, at the very end
    STORED = "stored"  # [StoredExchange, ...]: exchanges whose end and analysis were committed
    WRITES = "writes"  # StoreWrites, before each COUNTS: the store's work since the last


@dataclass(frozen=True, slots=True)
class StoredExchange:
    """One exchange as the store holds it once its end and its analysis are committed: what
    the proxy's metrics count, so that they and ``ssetape stats`` agree (see docs/FIGURES.md
    for each figure). The knowledge fields are None when its analysis could not be saved."""

    api: str | None
    model: str | None
    outcome: str | None
    fault: str | None  # vocabulary.Fault
    status: int | None
    state: str  # vocabulary.ExchangeState
    host: str
    port: int | None
    duration_us: int | None
    ttft_us: int | None
    input_tokens: int | None
    output_tokens: int | None
    # The gaps between its content events, counted per bucket of recording.stored.BOUNDS_US
    # (one count more than bounds: the last is past them all), and their sum.
    gaps: list[int]
    gaps_us: int
    # For its span (`ssetape record --otlp`, ssetape.telemetry.spans), as stored: started_at in
    # microseconds since the Unix epoch, is_stream, outcome_reason, how many findings; its
    # stalls (recording.stored.stalls_of: [start offset, gap], the longest) and their count.
    uid: str = ""
    started_us: int | None = None
    ttfb_us: int | None = None
    gap_max_us: int | None = None
    stream: bool | None = None
    reason: str | None = None
    findings: int = 0
    stalls: list[list[int]] | None = None
    stall_count: int = 0
    # The stored prompt and output text, only when the content-capture opt-in is set.
    request_text: str | None = None
    output_text: str | None = None


@dataclass(frozen=True, slots=True)
class StoreWrites:
    """What the recording process's store did since its last report."""

    seconds: list[float]  # each transaction of recorded rows, commit included
    queued: int  # rows taken in and not yet committed or dropped, now
    stream_bytes: int  # bytes of streamed bodies it took (to parse and store)


@dataclass(frozen=True, slots=True)
class Counts(RunCounts):
    """What one recording process stored and lost so far: its run row's counts and more."""

    capture_failures: int = 0  # streams it could not parse
    exchanges_finished: int = 0  # whose finish is committed
    # Of the losses above, those the proxy told it of (LOSSES): the proxy counts them too.
    told_exchanges: int = 0
    told_events: int = 0

    def plus(self, other: Counts) -> Counts:
        """Both processes' counts together (``last_error``: the later one's)."""
        summed = {
            f.name: getattr(self, f.name) + getattr(other, f.name)
            for f in dataclasses.fields(Counts)
            if f.name != "last_error"
        }
        return Counts(**summed, last_error=other.last_error or self.last_error)


@dataclass(frozen=True, slots=True)
class FinalCounts(Counts):
    saved: bool = True  # the run row holds these counts
    active: bool = True  # it recorded (beside the replayer: only if something came)
    last_failure: str | None = None  # why the run row could not be saved


def encode_report(kind: Report, value: object) -> bytes:
    # orjson writes a dataclass as an object of its fields (a list of them, as a list).
    return orjson.dumps({kind.value: value}) + b"\n"


def decode_report(line: bytes) -> tuple[Report, Any]:
    """One report line; ValueError (naming what it got) for anything else."""
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        raise ValueError(f"not a report: {line[:80]!r}") from None
    if not isinstance(obj, dict) or len(obj) != 1:
        raise ValueError(f"not a report: {line[:80]!r}")
    ((key, value),) = obj.items()
    try:
        kind = Report(key)
    except ValueError:
        raise ValueError(f"unknown report {key[:40]!r}") from None
    try:
        if kind in (Report.COUNTS, Report.FINAL, Report.WRITES):
            value = _TYPED[kind](**value)
        elif kind is Report.STORED:
            value = [StoredExchange(**one) for one in value]
    except TypeError as e:  # a key one side does not know
        raise ValueError(f"bad {kind} report: {e}") from None
    return kind, value


_TYPED: dict[Report, type[Any]] = {
    Report.COUNTS: Counts,
    Report.FINAL: FinalCounts,
    Report.WRITES: StoreWrites,
}
