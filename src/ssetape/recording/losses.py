"""What the proxy itself loses on the way to its recording process, counted once, told once.

Chunks past the buffer's bound, batches with no recording process to take them, and the rest
of every exchange begun in a process that died (an orphan: its successor never saw it begin)
are lost on the proxy's side. Only the proxy can count their events as the store would (an
event split across two chunks is one, see ``recording.event_count``), so it counts them here
and tells the next recording process the totals in a ``Lost`` message: its report then carries
them, and the exit line, its run row and ``ssetape stats`` agree.
"""

from __future__ import annotations

from ssetape.recording.protocol import (
    Begin,
    Chunk,
    Close,
    Finish,
    Gap,
    Lost,
    Message,
    Stream,
    Update,
    WsMessage,
)

__all__ = ["Losses"]


class Losses:
    def __init__(self) -> None:
        self.exchanges = 0
        self.events = 0
        self.orphans: set[str] = set()  # exchanges begun in a process that died
        # Counted, not yet told to a recording process.
        self._untold_exchanges = self._untold_events = 0

    def count(self, *, exchanges: int = 0, events: int = 0) -> None:
        self.exchanges += exchanges
        self.events += events
        self._untold_exchanges += exchanges
        self._untold_events += events

    def count_told(self, *, exchanges: int, events: int) -> None:
        """Lost, and told to the recording process some other way (its other pipe)."""
        self.exchanges += exchanges
        self.events += events

    @property
    def untold(self) -> bool:
        return bool(self._untold_exchanges or self._untold_events)

    def tell(self, batch: list[Message]) -> None:
        """Put what is untold into ``batch`` (before its CLOSE, if it ends with one)."""
        if not self.untold:
            return
        at = len(batch) - 1 if batch and isinstance(batch[-1], Close) else len(batch)
        batch.insert(at, Lost(self._untold_exchanges, self._untold_events))
        self._untold_exchanges = self._untold_events = 0

    def shed(self, batch: list[Message], events: dict[str, int]) -> list[Message]:
        """``batch`` without what belongs to orphans, their events (per exchange in
        ``events``, taken out of it) counted lost: the batch began before their process
        died, so the next one would get chunks of exchanges it never saw begin."""
        orphans = self.orphans
        if not orphans:
            return batch
        for uid in orphans.intersection(events):
            self.count(events=events.pop(uid))
        kept: list[Message] = []
        for msg in batch:
            if isinstance(msg, Finish) and msg.uid in orphans:
                orphans.discard(msg.uid)
            elif not (
                isinstance(msg, Chunk | Gap | Update | Stream | WsMessage) and msg.uid in orphans
            ):
                kept.append(msg)
        return kept

    def drop(self, batch: list[Message], events: int) -> None:
        """No recording process to take ``batch``: what it held is lost, and the rest of
        each exchange it begins."""
        self.count(events=events)
        for msg in batch:
            if isinstance(msg, Lost):  # told to no one: to the next recording process then
                self._untold_exchanges += msg.exchanges
                self._untold_events += msg.events
            elif isinstance(msg, Begin):
                self.count(exchanges=1)
                self.orphans.add(msg.uid)
            elif isinstance(msg, Finish):
                self.orphans.discard(msg.uid)
