"""The proxy's end of the recording process (``ssetape.recording.worker``).

Parsing and storing cost CPU that, in the proxy's own process, would hold the interpreter
lock the event loop needs to relay bytes. So the proxy only stamps each chunk and appends it
to a batch here; every few milliseconds the batch is pickled and written to the recording
process's stdin, without ever blocking: what the pipe does not take waits in a bounded buffer,
drained when the pipe is writable again. Past that bound new chunks are dropped and counted,
their exchange says how many bytes it misses, and its capture resumes at the next event:
the traffic is never slowed.

If the recording process dies, the exchanges it had in flight are counted as lost, a new one
is started (backing off if it keeps dying), and traffic is untouched throughout. If at the
end it does not take what is left in time (stopped, or too slow), what it never got is
counted and told to it on a pipe of its own (see ``recording.backlog``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import select
import time
from typing import Any

from ssetape.framing.framings import Framing
from ssetape.recording.backlog import Backlog
from ssetape.recording.capture import MAX_DECODED, MAX_EVENT
from ssetape.recording.child import PIPE_SIZE, Child, Listeners
from ssetape.recording.event_count import EventCount
from ssetape.recording.link_health import LinkHealth
from ssetape.recording.losses import Losses
from ssetape.recording.protocol import (
    Begin,
    Close,
    Configure,
    Counts,
    FinalCounts,
    Finish,
    Gap,
    Message,
    RetentionPolicy,
    Stream,
    Update,
    WorkerConfig,
    chunk_of,
    encode_frame,
)
from ssetape.recording.retired import Casualty, Retired

log = logging.getLogger("ssetape.recorder")

# A batch waits at most this long. Each hand-over wakes the recording process; at 20 ms
# those wake-ups cost 5 % of single-stream throughput (an A/B beside mitmdump, 30 rounds of
# 20,000 events: 0.95 of its rate at 20 ms, 1.00 at 50 and 100 ms). The recording process
# commits each batch at once, so the store still lags the traffic by under 100 ms.
FLUSH_DELAY = 0.05
FLUSH_BYTES = 256 * 1024
MAX_BUFFER = 64 << 20  # bytes of chunks waiting for the pipe, at most
_RESTART_FIRST, _RESTART_MAX = 1.0, 60.0
EXIT_GRACE = 20.0


class RecordLink:
    def __init__(
        self,
        db: str,
        *,
        max_pending: int,
        active: bool,
        max_buffer: int = 0,
        deadline: float = 5.0,
        price_data: str | None = None,
        retention: RetentionPolicy | None = None,
    ) -> None:
        self._cfg = WorkerConfig(
            db=db, max_pending=max_pending, active=active, deadline=deadline,
            price_data=price_data, retention=retention,
        )  # fmt: skip
        # Only for bursts the recording process cannot parse at once: a store that is slow
        # or down is what its writer's queue (``max_pending`` rows) is for.
        self._max_buffer = max_buffer or max(PIPE_SIZE, min(max_pending * 1024, MAX_BUFFER))
        self._child: Child | None = None
        self._batch: list[Message] = []
        self._batch_bytes = 0
        # Events in the batch's chunks, as the store counts them, per exchange.
        self._batch_events: dict[str, int] = {}
        self._events = EventCount()
        self._out = Backlog()  # framed batches the pipe has not taken yet
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watching = False
        self._restart_at = 0.0
        self._backoff = _RESTART_FIRST
        self._closing = False
        self._spawned = False
        self._losses = Losses()  # the proxy's own
        self.restarts, self.listeners = 0, Listeners()  # who hears its STORED, WRITES reports
        # Recording processes that died, settled from the store at close.
        self.retired = Retired()

    def start(self) -> None:
        """Start the recording process now, warm for the first exchange; beside the
        replayer (not ``active``) only once there is something to record."""
        if self._cfg.active:
            self._spawn()

    def wait_ready(self, timeout: float) -> bool:
        """Block (not on the loop) until the recording process has opened the store, has
        died, or ``timeout`` passed; True if it is ready or none is due to start yet."""
        child = self._child
        if child is None:
            return not self._spawned
        deadline = time.monotonic() + timeout
        while not child.ready.wait(0.05):
            if child.ended.is_set() or time.monotonic() > deadline:
                return False
        return True

    @property
    def retention(self) -> RetentionPolicy | None:
        """What its recording process prunes, and how often."""
        return self._cfg.retention

    @property
    def pid(self) -> int | None:
        """The recording process's pid, while it runs."""
        return self._child.proc.pid if self._child is not None else None

    def health(self) -> LinkHealth:
        """For health checks (``addons.admin``): any thread may call it."""
        return LinkHealth.of(self._child, self._spawned, len(self._out), self._max_buffer)

    def rename(self, name: str) -> None:  # its run rows' instance (addons.logs), on the loop
        self._cfg = dataclasses.replace(self._cfg, name=name)  # the next process's too
        self._batch += [Configure(self._cfg)] if self._spawned else []
        self._schedule()

    # The proxy's side: called on its event loop (or wherever its hooks run), never blocks.

    def begin(self, uid: str, fields: dict[str, Any]) -> None:
        self._send(Begin(uid, fields))

    def update(self, uid: str, fields: dict[str, Any]) -> None:
        self._send(Update(uid, fields))

    def stream(
        self,
        uid: str,
        *,
        framing: Framing,
        encoding: str,
        max_event: int = MAX_EVENT,
        max_decoded: int = MAX_DECODED,
    ) -> None:
        encoded = encoding.strip().lower() not in ("", "identity")
        self._events.stream(uid, framing=framing, encoded=encoded)
        self._send(Stream(uid, framing.value, encoding, max_event, max_decoded))

    def finish(self, uid: str, offset: int, fields: dict[str, Any]) -> None:
        last = self._events.end(uid)  # a last event without its blank line
        if uid in self._losses.orphans:
            self._losses.count(events=last)
        elif last:
            self._batch_events[uid] = self._batch_events.get(uid, 0) + last
        self._send(Finish(uid, offset, fields))

    def chunk(self, uid: str, offset: int, data: bytes) -> None:
        """One relayed chunk, ``offset`` µs into its exchange: the hot path."""
        events = self._events.chunk(uid, data)
        if len(self._out) > self._max_buffer or uid in self._losses.orphans:
            self._lose(uid, data, events)
            return
        self._batch.append(chunk_of((uid, offset, data)))
        self._batch_bytes += len(data)
        if events:
            self._batch_events[uid] = self._batch_events.get(uid, 0) + events
        if self._timer is None:
            self._schedule()
        elif self._batch_bytes > FLUSH_BYTES:
            self.flush()

    def note_lost_exchange(self) -> None:
        """An exchange the proxy could not hand over (a bug in its hooks)."""
        self._losses.count(exchanges=1)

    @property
    def lost_exchanges(self) -> int:
        return self._losses.exchanges

    @property
    def lost_events(self) -> int:
        """In chunks it could not hand over."""
        return self._losses.events

    def _lose(self, uid: str, data: bytes, events: int) -> None:
        self._losses.count(events=events)
        if uid in self._losses.orphans:
            self._schedule()  # the count goes out with the next batch
            return
        # In stream order, so the recording process knows where the hole is; its last bytes
        # tell whether the next chunk starts a new event.
        last = self._batch[-1] if self._batch else None
        if isinstance(last, Gap) and last.uid == uid:
            self._batch[-1] = Gap(uid, last.nbytes + len(data), (last.tail + data)[-4:])
        else:
            self._batch.append(Gap(uid, len(data), data[-4:]))
        self._schedule()

    def _send(self, msg: Begin | Update | Stream | Finish) -> None:
        uid = msg.uid
        if uid in self._losses.orphans:
            if isinstance(msg, Finish):
                self._losses.orphans.discard(uid)
            return
        self._batch.append(msg)
        if self._timer is None:
            self._schedule()

    def _schedule(self) -> None:
        if self._timer is not None:
            return
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:  # not on a loop (tests, shutdown): no one to flush later
            self.flush()
            return
        self._timer = self._loop.call_later(FLUSH_DELAY, self.flush)

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch, self._batch, self._batch_bytes = self._batch, [], 0
        per_uid, self._batch_events = self._batch_events, {}
        if not batch and not self._losses.untold:
            return
        child = self._ready_child()  # which may bury one that died since the batch began
        batch = self._losses.shed(batch, per_uid)
        events = sum(per_uid.values())
        self._losses.tell(batch)
        if not batch:
            return
        if child is None:
            self._losses.drop(batch, events)
            return
        self._out.add(batch, events, child)
        self._write()

    def _write(self) -> None:
        child = self._child
        if child is None:
            return
        try:
            while self._out:
                child.handed += self._out.taken(os.write(child.fd, self._out.out))
        except BlockingIOError:
            pass
        except OSError:
            self._bury(child)
            return
        self._watch(bool(self._out))

    def _watch(self, on: bool) -> None:
        """Have the loop call :meth:`_write` when the pipe takes more."""
        if on == self._watching or self._loop is None or self._child is None:
            return
        if on:
            self._loop.add_writer(self._child.fd, self._write)
        else:
            self._loop.remove_writer(self._child.fd)
        self._watching = on

    def settled(self) -> bool:
        """Whether everything handed so far is stored: nothing waits for the pipe, and the
        recording process committed the end of every exchange it began (call it on the loop)."""
        if self._batch or self._losses.untold:
            self.flush()  # now, not a flush delay later
        child = self._child
        if child is not None and child.ended.is_set():
            self._bury(child)  # what it held is counted lost: nothing more will come of it
            return not self._batch
        return not self._out and not self._batch and (child is None or child.settled())

    def totals(self) -> Counts:
        """What was stored and lost so far, each loss once: the proxy's own, and what its
        recording processes (alive or dead) lost besides."""
        got = self.retired.totals()
        if self._child is not None:
            got = got.plus(self._child.counts)
        return dataclasses.replace(
            got,
            exchanges_lost=got.exchanges_lost - got.told_exchanges + self.lost_exchanges,
            events_lost=got.events_lost - got.told_events + self.lost_events,
            told_exchanges=0,
            told_events=0,
        )

    # The recording process's life.

    def _spawn(self) -> None:
        self._spawned = True
        try:
            self._child = Child(self.listeners)
        except OSError as e:
            log.error("ssetape: cannot start the recording process: %s", e)
            self._restart_at = time.monotonic() + self._backoff
            self._backoff = min(self._backoff * 2, _RESTART_MAX)
            return
        self._restart_at = time.monotonic() + self._backoff
        config = encode_frame([Configure(self._cfg)])
        self._out.first(config)
        self._write()  # it opens the store while the proxy starts

    def _ready_child(self) -> Child | None:
        child = self._child
        if child is not None and not child.ended.is_set():
            return child
        if child is not None:
            self._bury(child)
        elif not self._spawned:  # the first exchange of a replaying session
            self._spawn()
            return self._child
        if self._closing or time.monotonic() < self._restart_at:
            return None
        self._spawn()
        if self._child is not None:
            self.restarts += 1
            log.warning("ssetape: recording process started again (%d restarts)", self.restarts)
        return self._child

    def _bury(self, child: Child) -> None:
        """The recording process died: what it had in flight is lost, traffic goes on."""
        self._watch(False)
        self._child = None
        # Frames it never read: their events are lost (pickle keeps chunk bytes as they are).
        unfinished = len(child.open) + len(child.finishing)
        self._losses.count(exchanges=unfinished, events=self._out.events())
        self._out.clear()
        # Its reader thread reaps it (poll() here would race that wait); a dead process is
        # reaped at once, so this only waits for one that closed the pipe but lives on.
        code: int | str | None = child.proc.returncode if child.ended.wait(0.5) else None
        if code is None:
            child.proc.kill()
            code = "none: it stopped reading, so it was killed"
        self._losses.orphans |= child.open
        self._retire(child)
        if time.monotonic() - child.started > _RESTART_MAX:
            self._backoff = _RESTART_FIRST  # it had been fine for a while: no penalty
        elif not self._closing:
            self._backoff = min(self._backoff * 2, _RESTART_MAX)
        log.error(
            "ssetape: the recording process ended unexpectedly (exit code %s); %d exchange(s) "
            "in flight not fully recorded; traffic continues",
            code,
            unfinished,
        )
        with contextlib.suppress(OSError):
            child.stdin.close()
        child.close_control()

    def detach(self) -> None:
        """From now on :meth:`close` runs in another thread: no more loop callbacks (call
        it on the loop, after the last message)."""
        self._watch(False)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._loop = None

    def close(self, timeout: float = 10.0) -> FinalCounts | None:
        """Hand over what is left (waiting up to ``timeout`` for the pipe), then wait for the
        recording process to store it and report its final counts."""
        if not self._spawned and not self._batch:
            return self._idle_final()
        self._closing = True
        self._batch.append(Close())
        self.flush()  # the proxy's last losses go with it, before it
        child = self._child
        if child is None:
            return None
        self._watch(False)
        self._loop = None  # from here on this thread writes; no loop callbacks
        deadline = time.monotonic() + timeout
        while self._out and not child.ended.is_set() and time.monotonic() < deadline:
            select.select([], [child.fd], [], 0.1)
            self._write()
            if self._child is None:
                return None
        untold = self._strand(child) if self._out and not child.ended.is_set() else None
        with contextlib.suppress(OSError):
            child.stdin.close()
        child.close_control()
        # Its own deadline: the store may need its writer's whole grace (10 s) plus the
        # run row's (5 s) after a long drain.
        if not child.ended.wait(EXIT_GRACE):
            log.error("ssetape: the recording process did not finish in %g s; stopped", EXIT_GRACE)
            child.proc.kill()
        child.reader.join(5.0)
        self._child = None
        final = child.final
        if final is None:  # it died before its final report: the same losses
            self._losses.count(exchanges=len(child.open) + len(child.finishing))
            self._retire(child)
            final = FinalCounts(saved=False, last_failure="it died before its final report")
        elif untold is not None:  # in the exit line at least (its run row misses them)
            final = dataclasses.replace(
                final,
                exchanges_lost=final.exchanges_lost + untold[0],
                events_lost=final.events_lost + untold[1],
            )
        # Exact counts of the processes that died, from the store (this runs off the loop).
        self.retired.settle(self._cfg.db, deadline=self._cfg.deadline)
        return final

    def _strand(self, child: Child) -> tuple[int, int] | None:
        """Closing, and the recording process did not take the rest in time: what it will
        never get is lost, counted here and told to it on its other pipe; (exchanges,
        events) if it could not be told."""
        rest = self._out.strand()
        self._losses.count_told(exchanges=rest.own_exchanges, events=rest.own_events)
        child.told += rest.own_events  # if it dies before it reads them, counted as told
        told = child.tell(rest.trailer) or child.tell(rest.short)
        log.error(
            "ssetape: the recording process did not take the last %d event(s) and %d "
            "exchange(s) in time (stopped, or too slow); counted lost%s",
            rest.events,
            rest.exchanges,
            "" if told else " here only: it could not be told",
        )
        return None if told else (rest.exchanges, rest.events)

    def _retire(self, child: Child) -> None:
        self.retired.add(
            Casualty(
                child.recorder_id,
                child.counts,
                handed=child.handed,
                told=child.told,
                done=child.done,
            )
        )

    def _idle_final(self) -> FinalCounts:
        """The final counts of a session that never had anything to record."""
        return FinalCounts(
            exchanges_lost=self.lost_exchanges, events_lost=self.lost_events, active=False
        )
