"""What the proxy framed for its recording process and the pipe has not taken yet.

Each frame's events count as handed over once the pipe took all of it (a recording process
reads whole frames). A frame also remembers what a recording process that never reads it
would miss: the exchanges it begins, the losses it tells, and the bytes of each stream. So
when the proxy stops and the process has not taken the rest in time (it is stopped, or too
slow), :meth:`Backlog.strand` turns the rest into the few messages that tell it what it
will never get: the exit line, its run row and its exchanges then say so.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from ssetape.recording.child import Child
from ssetape.recording.protocol import (
    Begin,
    Chunk,
    Close,
    Finish,
    Gap,
    Lost,
    Message,
    encode_frame,
)

__all__ = ["Backlog", "Frame", "Stranded"]


@dataclass(slots=True)
class Frame:
    left: int  # its bytes the pipe has not taken
    events: int  # in its chunks, as the store counts them (EventCount)
    begins: list[str] = field(default_factory=list)
    told_exchanges: int = 0  # losses it tells of (a ``Lost`` message)
    told_events: int = 0
    streams: dict[str, int] = field(default_factory=dict)  # uid -> bytes of its chunks


@dataclass(frozen=True, slots=True)
class Stranded:
    """Frames a recording process will never read: what that costs, and how to tell it."""

    exchanges: int  # begun in them, and the losses they told of
    events: int  # in their chunks, and the losses they told of
    own_exchanges: int  # begun in them only (the proxy counted the told ones already)
    own_events: int
    # Where each stream the process knows breaks off, the losses, the end of the session.
    trailer: list[Message]
    short: list[Message]  # the same without the streams, if the trailer is too long


class Backlog:
    def __init__(self) -> None:
        self.out = bytearray()  # framed batches, back to back
        self.frames: deque[Frame] = deque()

    def __len__(self) -> int:
        return len(self.out)

    def add(self, batch: list[Message], events: int, child: Child) -> None:
        """Frame ``batch`` (holding ``events``) for ``child``, noting what it holds."""
        frame = Frame(0, events)
        streams = frame.streams
        for msg in batch:
            if isinstance(msg, Chunk):
                streams[msg.uid] = streams.get(msg.uid, 0) + len(msg.data)
            elif isinstance(msg, Gap):
                streams[msg.uid] = streams.get(msg.uid, 0) + msg.nbytes
            elif isinstance(msg, Begin):
                child.open.add(msg.uid)
                frame.begins.append(msg.uid)
            elif isinstance(msg, Finish):
                child.open.discard(msg.uid)
                child.finishing.add(msg.uid)
            elif isinstance(msg, Lost):
                child.told += msg.events
                frame.told_exchanges += msg.exchanges
                frame.told_events += msg.events
        data = encode_frame(batch)
        frame.left = len(data)
        self.out += data
        self.frames.append(frame)

    def first(self, data: bytes) -> None:
        """A frame that must go before all others (the configuration)."""
        self.out[:0] = data
        self.frames.appendleft(Frame(len(data), 0))

    def taken(self, n: int) -> int:
        """The pipe took ``n`` more bytes: the events of the frames it now took whole."""
        del self.out[:n]  # cheap: CPython trims a bytearray's front in place
        handed = 0
        frames = self.frames
        while n and frames:
            first = frames[0]
            took = min(n, first.left)
            first.left -= took
            n -= took
            if first.left == 0:
                handed += frames.popleft().events
        return handed

    def events(self) -> int:
        return sum(f.events for f in self.frames)

    def clear(self) -> None:
        self.out.clear()
        self.frames.clear()

    def strand(self) -> Stranded:
        """Give the rest up (the frame the pipe took a part of too: its reader gets a
        truncated frame, which it drops whole)."""
        frames = list(self.frames)
        self.clear()
        own_exchanges = sum(len(f.begins) for f in frames)
        own_events = sum(f.events for f in frames)
        exchanges = own_exchanges + sum(f.told_exchanges for f in frames)
        events = own_events + sum(f.told_events for f in frames)
        unknown = {uid for f in frames for uid in f.begins}  # begun in what it never reads
        cut: dict[str, int] = {}
        for f in frames:
            for uid, size in f.streams.items():
                if uid not in unknown:
                    cut[uid] = cut.get(uid, 0) + size
        end: list[Message] = [Lost(exchanges, events), Close()]
        gaps: list[Message] = [Gap(uid, size, b"") for uid, size in cut.items()]
        return Stranded(exchanges, events, own_exchanges, own_events, [*gaps, *end], end)
