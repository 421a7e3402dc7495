"""The pipe between the proxy and its recording process: every message and report, once.

Both ends import this module; nothing else knows the tags.

**Messages**, proxy -> recording process (stdin): frames of a 4-byte length and a pickled batch
(a list) of messages. A message is a tuple whose first item is its kind, a short string: a chunk
message is built for every relayed chunk, so they stay plain tuples (``uid`` names one
exchange, offsets are integer microseconds from the moment the proxy had the whole request):

- ``(CONFIG, WorkerConfig)``: always the first message
- ``(BEGIN, uid, fields)``: the request arrived; ``(UPDATE, uid, fields)``: response headers
- ``(STREAM, uid, framing, encoding, max_event, max_decoded)``: a streamed body begins: how it
  is cut into events (a ``Framing`` value), the bytes one of its events and its decoded body
  may take (the proxy's options when it began)
- ``(CHUNK, uid, offset_us, data)``: one relayed chunk, stamped by the proxy
- ``(GAP, uid, nbytes, tail)``: chunks the proxy did not pass on (the recording process fell
  behind); ``tail``: their last bytes, to find where the next event starts
- ``(FINISH, uid, offset_us, fields)``: the exchange ended
- ``(LOSSES, exchanges, events)``: what the proxy itself lost since its last LOSSES
- ``(CLOSE,)``: store what is left and exit

If stdin ends without CLOSE, the proxy is gone (killed): everything it sent is still stored
and its exchanges in flight are marked interrupted.

**Reports**, recording process -> proxy (a private copy of stdout): JSON lines, each one
object with one key, a :class:`Report`.

A message or report the other side does not know is logged as an error, never skipped: the
two ends come from one installation, so it can only mean a bug or mismatched versions.
"""

from __future__ import annotations

import dataclasses
import pickle
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import IO, Any, Final, Literal

import orjson

from ssetape.storage.runs import RunCounts

__all__ = [
    "BEGIN",
    "CHUNK",
    "CLOSE",
    "CONFIG",
    "FINISH",
    "GAP",
    "HEADER",
    "LOSSES",
    "STREAM",
    "UPDATE",
    "BeginMsg",
    "ChunkMsg",
    "CloseMsg",
    "ConfigMsg",
    "Counts",
    "FinalCounts",
    "FinishMsg",
    "GapMsg",
    "LossesMsg",
    "Message",
    "Report",
    "RetentionPolicy",
    "StreamMsg",
    "UpdateMsg",
    "WorkerConfig",
    "decode_report",
    "encode_frame",
    "encode_report",
    "read_frames",
]

CONFIG: Final = "cfg"
BEGIN: Final = "b"
UPDATE: Final = "u"
STREAM: Final = "s"
CHUNK: Final = "c"
GAP: Final = "g"
FINISH: Final = "f"
LOSSES: Final = "n"
CLOSE: Final = "close"

ConfigMsg = tuple[Literal["cfg"], "WorkerConfig"]
BeginMsg = tuple[Literal["b"], str, dict[str, Any]]
UpdateMsg = tuple[Literal["u"], str, dict[str, Any]]
StreamMsg = tuple[Literal["s"], str, str, str, int, int]
ChunkMsg = tuple[Literal["c"], str, int, bytes]
GapMsg = tuple[Literal["g"], str, int, bytes]
FinishMsg = tuple[Literal["f"], str, int, dict[str, Any]]
LossesMsg = tuple[Literal["n"], int, int]
CloseMsg = tuple[Literal["close"]]
Message = (
    ConfigMsg | BeginMsg | UpdateMsg | StreamMsg | ChunkMsg | GapMsg | FinishMsg | LossesMsg
) | CloseMsg

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


def encode_frame(batch: list[Message]) -> bytes:
    payload = pickle.dumps(batch, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(payload)) + payload


def read_frames(inp: IO[bytes]) -> Iterator[list[Message]]:
    """Message batches from the proxy until its end of the pipe closes."""
    while True:
        head = inp.read(HEADER.size)
        if len(head) < HEADER.size:
            return
        (size,) = HEADER.unpack(head)
        payload = inp.read(size)
        if len(payload) < size:
            return
        yield pickle.loads(payload)


class Report(StrEnum):
    READY = "ready"  # its recorder id: the store is open, recording works
    LOG = "log"  # [logger name, level, message]: logged by the proxy as its own
    COUNTS = "counts"  # Counts, twice a second: if the process dies, the proxy still knows
    DONE = "done"  # [uid, ...]: exchanges whose finish was just committed (COUNTS follows)
    FINAL = "final"  # FinalCounts, once, at the very end


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
    if isinstance(value, Counts):
        value = dataclasses.asdict(value)
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
    if kind in (Report.COUNTS, Report.FINAL):
        try:
            value = (Counts if kind is Report.COUNTS else FinalCounts)(**value)
        except TypeError as e:  # a key one side does not know
            raise ValueError(f"bad {kind} report: {e}") from None
    return kind, value
