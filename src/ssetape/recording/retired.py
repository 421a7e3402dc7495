"""Recording processes that died: what each really stored, read from its run row.

A recording process reports its counts twice a second, so a ``kill -9`` leaves its last report
up to half a second (and a batch or two) behind what it committed. Its run row is not: every
transaction that stores rows also writes the running totals into it
(``Runs.count_stored``). When the proxy closes, it reads each dead process's stored counts
there, takes what it handed over and never saw stored as lost, and writes those counts into
that run row: the exit line, ``recorder_runs`` and ``ssetape stats`` then agree, even when a
prune or ``ssetape_retain`` removed some of those rows in between (they were stored all the
same; the store's rows are never recounted).
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
    done: int = 0  # exchanges whose end it reported committed
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
        """Read each casualty's stored counts from its run row and write its losses there
        (blocks: call it off the event loop). A store that cannot answer leaves the reported
        counts; a casualty settled once is never settled again."""
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
                run = runs.get(c.recorder_id)
                exchanges = run.exchanges_recorded if run is not None else 0
                events = run.events_recorded if run is not None else 0
                c.exact = dataclasses.replace(
                    c.reported,
                    exchanges_recorded=exchanges,
                    exchanges_finished=max(c.done, c.reported.exchanges_finished),
                    events_recorded=events,
                    events_lost=c.told + max(0, c.handed - events),
                )
                runs.save(c.recorder_id, now, c.exact, stopped_at=now, keep_stored=True)
        except Exception as e:
            log.warning(
                "ssetape: cannot count what the dead recording process stored: %s", one_line(e)
            )
        finally:
            store.close()
