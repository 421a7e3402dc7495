"""Recording processes that died: what each really stored, counted from the store itself.

A recording process reports its counts twice a second, so a ``kill -9`` leaves its last report
up to half a second (and a batch or two) behind what it committed. When the proxy closes, it
counts each dead process's rows in the store (by its recorder id), takes what it was handed
and never stored as lost, and writes those exact counts into that process's run row: the exit
line, ``recorder_runs`` and ``ssetape stats`` then agree with the store.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from dataclasses import dataclass, field

from ssetape.recording.protocol import Counts
from ssetape.storage.engine import one_line
from ssetape.storage.runs import Runs
from ssetape.storage.store import Store

__all__ = ["Casualty", "Retired"]

log = logging.getLogger("ssetape.recorder")


@dataclass
class Casualty:
    """One recording process that died, as the proxy knew it."""

    recorder_id: str | None  # from its ready report; None if it never got that far
    reported: Counts  # its last report
    handed: int  # events in the frames it took whole, as the store counts them (EventCount)
    told: int  # events the proxy itself lost and told it of (they are in its report)
    exact: Counts | None = field(default=None)


class Retired:
    def __init__(self) -> None:
        self.casualties: list[Casualty] = []

    def add(self, casualty: Casualty) -> None:
        self.casualties.append(casualty)

    def totals(self) -> Counts:
        """What the dead processes stored and lost: exact once settled, else as reported."""
        total = Counts()
        for c in self.casualties:
            total = total.plus(c.exact or c.reported)
        return total

    def settle(self, db: str, *, deadline: float = 5.0) -> None:
        """Count each casualty's rows in the store and correct its run row (blocks: call it
        off the event loop). A store that cannot answer leaves the reported counts."""
        todo = [c for c in self.casualties if c.exact is None and c.recorder_id is not None]
        if not todo:
            return
        try:
            store = Store.open(db, create=False, migrate=False, deadline=deadline)
        except Exception as e:
            log.warning("ssetape: cannot count what the dead recording process stored: %s", e)
            return
        try:
            runs = Runs(store)
            now = dt.datetime.now(dt.UTC)
            for c in todo:
                assert c.recorder_id is not None
                exchanges, finished, events = runs.tally(c.recorder_id)
                c.exact = dataclasses.replace(
                    c.reported,
                    exchanges_recorded=exchanges,
                    exchanges_finished=finished,
                    events_recorded=events,
                    events_lost=c.told + max(0, c.handed - events),
                )
                runs.save(c.recorder_id, now, c.exact, stopped_at=now)
        except Exception as e:
            log.warning(
                "ssetape: cannot count what the dead recording process stored: %s", one_line(e)
            )
        finally:
            store.close()
