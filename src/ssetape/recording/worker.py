"""The recording process: parses, analyses and stores what the proxy relays.

The proxy's :class:`~ssetape.recording.link.RecordLink` starts
``python -m ssetape.recording.worker`` and writes batches of messages to its stdin
(:mod:`ssetape.recording.protocol` defines them and the reports this process sends back).
This process owns the SSE parsing (``Capture``), the ``Writer`` thread, the stream analysis
(``LiveAnalysis``, saved by ``Knowledge``) and the run row (``RunReporter``), so none of that
competes with the proxy's event loop for its interpreter lock. It reports, as JSON lines on
stdout, that it is ready (its store open), its log records, its counts twice a second and,
at the end, its final counts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import IO, Any

from ssetape.analysis.knowledge import Knowledge
from ssetape.analysis.live_analysis import LiveAnalysis
from ssetape.cost.price_book import LazyPriceBook
from ssetape.framing.framings import Framing
from ssetape.recorder_id import RecorderId
from ssetape.recording.capture import Capture
from ssetape.recording.event_count import EventCount
from ssetape.recording.protocol import (
    Begin,
    Chunk,
    Close,
    Configure,
    Counts,
    FinalCounts,
    Finish,
    Gap,
    Lost,
    Message,
    Report,
    StoredExchange,
    Stream,
    Unknown,
    Update,
    WorkerConfig,
    WsMessage,
    encode_report,
    read_frames,
)
from ssetape.recording.retention import Retention
from ssetape.recording.stored import StoredFigures, StoreWork
from ssetape.recording.ws_sessions import WsSessions
from ssetape.storage.engine import one_line
from ssetape.storage.ledger import Ledger
from ssetape.storage.runs import RunCounts, RunReporter, Runs
from ssetape.storage.store import Store
from ssetape.storage.write_times import WriteTimes
from ssetape.storage.writer import Writer
from ssetape.vocabulary import ExchangeState

log = logging.getLogger("ssetape.recorder")

PROXY_GONE = "the proxy process ended before the exchange did (killed?)"
NOT_TAKEN = "the recorder stopped before the recording process took the exchange's end"
REPORT_EVERY = 0.5
FELL_BEHIND = "the recording process fell behind"
NICE = 10
# Every event makes a dozen short-lived objects (the parsed JSON above all); at Python's
# default threshold the young-generation collection ran every ~60 events and, with the
# older ones it triggers, cost a fifth of this process's CPU (`python -m bench.bench_worker`).
GC_THRESHOLD = (50_000, 20, 20)
_RUN_FIELDS = dataclasses.fields(RunCounts)


class Channel:
    """The JSON lines this process reports to the proxy on; any thread may send."""

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out
        self._lock = threading.Lock()

    def send(self, kind: Report, value: object) -> bool:
        """False when the proxy is gone (its end of the pipe with it)."""
        line = encode_report(kind, value)
        try:
            with self._lock:
                self._out.write(line)
                self._out.flush()
        except OSError:
            return False
        return True


class _Forward(logging.Handler):
    """Log records go to the proxy, which logs them as its own."""

    def __init__(self, channel: Channel) -> None:
        super().__init__(logging.INFO)
        self._channel = channel

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):  # nobody to tell: logging must never raise
            self._channel.send(Report.LOG, [record.name, record.levelno, record.getMessage()])


class RecordWorker:
    def __init__(self, cfg: WorkerConfig) -> None:
        self.recorder_id = str(RecorderId.current())
        # The proxy opened (and migrated) it already.
        self.store = Store.open(cfg.db, create=False, migrate=False, deadline=cfg.deadline)
        # What the proxy's metrics read: each exchange as stored, and the store's work.
        self.figures = StoredFigures(lambda uid: self.live.take_timed(uid))
        self.work = StoreWork(WriteTimes(self.store.engine))
        self.on_figures: Callable[[list[StoredExchange]], object] = lambda figures: None
        # Each stream is analysed as it is captured; its knowledge is saved when the
        # exchange's finish is committed (in the writer's thread).
        self.knowledge = Knowledge(
            self.store, self.figures.take, prices=LazyPriceBook(cfg.price_data)
        )
        self.writer = Writer(
            self.store,
            on_finished=self.finished,
            max_pending=cfg.max_pending,
            deadline=cfg.deadline,
            # What it stored goes into its run row with the rows themselves: if this process
            # dies, the proxy reads it there (recording.retired), never recounts rows.
            on_commit=self.work.times.timing(
                lambda conn, exchanges, events: self.reporter.stored(conn, exchanges, events)
            ),
        )
        self.live = LiveAnalysis(self.writer)
        self.sessions = WsSessions(self.writer, self.writer.ledger, self.live)  # WebSocket
        self.reporter = RunReporter(
            Runs(self.store), self.recorder_id, self.run_counts, name=cfg.name
        )
        # ssetape_retain: pruned here, on this process's engine, never in the proxy's.
        self.retention = Retention(self.store, cfg.retention) if cfg.retention is not None else None
        self.active = cfg.active
        self.captures: dict[str, Capture] = {}
        self.open: set[str] = set()  # begun here, not finished
        # Events of exchanges this process never saw begin, counted as the proxy counts
        # what it hands over (by their framing), so that the two agree.
        self.strays = EventCount()
        self.closed = False
        self.unknown: set[str] = set()  # message kinds logged already
        self.on_stored: Callable[[list[str]], object] = lambda uids: None
        self._handlers: dict[type[Any], Callable[[Any], None]] = {
            Chunk: self._chunk,
            Begin: self._begin,
            Update: self._update,
            Stream: self._stream,
            Gap: self._gap,
            WsMessage: lambda msg: self.sessions.message(msg, self.open),
            Finish: self._finish,
            Lost: self._lost,
            Close: self._close,
            Configure: self._configure,
            Unknown: self._unknown,
        }

    @property
    def ledger(self) -> Ledger:
        """Its one set of books: every count it reports and saves."""
        return self.writer.ledger

    def start(self) -> None:
        # Loaded beside the first streams, so that the first save does not wait for it.
        self.knowledge.prices.preload()
        self.writer.start()
        # Beside the replayer, a replay-only session must leave its tape untouched: the
        # run row appears with the first recorded exchange.
        self.reporter.start(active=self.active)
        if self.retention is not None:
            self.retention.start()

    def run_counts(self) -> RunCounts:  # called in the reporter's thread
        return self.writer.stats.run_counts()

    def counts(self) -> Counts:
        """All its counters, for the proxy: one snapshot of its ledger."""
        st = self.writer.stats
        counts = st.run_counts()
        return Counts(
            # Not dataclasses.asdict: it deep-copies each value, four times the cost (this runs
            # after each commit that ends an exchange).
            **{f.name: getattr(counts, f.name) for f in _RUN_FIELDS},
            capture_failures=st.capture_failures,
            exchanges_finished=st.exchanges_finished,
            told_exchanges=st.told_exchanges,
            told_events=st.told_events,
        )

    def handle_batch(self, batch: list[Message]) -> None:
        """One batch from the proxy; its event rows go to the writer together."""
        handlers = self._handlers
        for msg in batch:
            try:
                handlers[type(msg)](msg)
            except Exception as e:  # one bad message must not end the recording
                log.error("ssetape: recording error (%s): %s", type(msg).__name__, one_line(e))
        self.live.flush()
        self.writer.hurry()

    def _unknown(self, msg: Unknown) -> None:
        if msg.tag not in self.unknown:
            self.unknown.add(msg.tag)
            log.error(
                "ssetape: the proxy sent a message of unknown kind %r (mismatched ssetape "
                "versions?); such messages are not recorded",
                msg.tag[:40],
            )

    # One method per message type (see ssetape.recording.protocol).

    def _chunk(self, msg: Chunk) -> None:
        self.work.stream_bytes += len(msg.data)
        capture = self.captures.get(msg.uid)
        if capture is None:
            self.ledger.not_stored(self.strays.chunk(msg.uid, msg.data))
        else:
            capture.feed(msg.data, msg.offset_us)

    def _begin(self, msg: Begin) -> None:
        uid, fields = msg
        self.open.add(uid)
        self.live.begin(uid, fields)
        self.figures.begin(uid, fields)
        self.writer.begin(uid, recorder=self.recorder_id, **fields)
        self.reporter.activate()

    def _update(self, msg: Update) -> None:
        if msg.uid in self.open:  # else begun in a recording process that died: the sweep's
            self.live.update(msg.uid, msg.fields)
            self.figures.update(msg.uid, msg.fields)
            self.writer.update(msg.uid, **msg.fields)

    def _stream(self, msg: Stream) -> None:
        uid, framing, encoding = msg.uid, Framing.validate(msg.framing), msg.encoding
        if uid in self.open:
            self.captures[uid] = Capture(
                uid,
                self.live,
                framing=framing,
                encoding=encoding,
                max_event=msg.max_event,
                max_decoded=msg.max_decoded,
            )
        else:  # its events are counted lost as they come, as the proxy counts them
            encoded = encoding.strip().lower() not in ("", "identity")
            self.strays.stream(uid, framing=framing, encoded=encoded)

    def _gap(self, msg: Gap) -> None:
        capture = self.captures.get(msg.uid)
        if capture is not None:
            capture.gap(msg.nbytes, msg.tail)

    def _finish(self, msg: Finish) -> None:
        if msg.uid in self.open:
            self.finish(msg.uid, msg.offset_us, msg.fields)
        else:  # a last event without its end, as the proxy counts it
            self.ledger.not_stored(self.strays.end(msg.uid))

    def _lost(self, msg: Lost) -> None:
        self.ledger.told(msg.exchanges, msg.events)

    def _close(self, msg: Close) -> None:
        self.closed = True

    def _configure(self, msg: Configure) -> None:
        # A later one names the instance (the port the proxy chose, known once it listens).
        self.reporter.name = msg.config.name

    def finished(self, done: list[tuple[int, str]]) -> None:
        """The writer committed these exchanges' finish (called in its thread)."""
        self.ledger.finished(len(done))
        uids = [uid for _, uid in done]
        self.on_stored(uids)
        saved = False
        try:
            self.knowledge.save_live(done)
            saved = True
        finally:  # the store holds them, with their analysis or without
            self.on_figures(self.figures.stored(uids, analysed=saved))

    def finish(self, uid: str, offset: int, fields: dict[str, Any]) -> None:
        self.open.discard(uid)
        self.sessions.finish(uid)
        capture = self.captures.pop(uid, None)
        if capture is not None:
            capture.close(offset)
            self.ledger.not_stored(capture.not_stored, failed_capture=capture.error is not None)
            notes = [fields["error"], capture.error, *capture.notes]
            if capture.missing:
                notes.append(f"{capture.missing} bytes not recorded: {FELL_BEHIND}")
            if capture.gap_seq is not None:
                fields["gap_seq"] = capture.gap_seq
            fields["error"] = "; ".join(n for n in notes if n) or None
        self.live.finish(uid, fields)
        self.figures.finish(uid, fields)
        self.writer.finish(uid, **fields)

    def stop(self) -> FinalCounts:
        """Store what is left; the final counts for the proxy's exit line."""
        if self.retention is not None:  # first: a prune in progress stops at its next batch
            self.retention.close()
        if not self.closed and self.open:
            log.warning(
                "ssetape: the proxy ended without stopping the recorder; %d exchange(s) in "
                "flight marked interrupted",
                len(self.open),
            )
        why = NOT_TAKEN if self.closed else PROXY_GONE
        for uid in list(self.open):
            capture = self.captures.get(uid)
            end = capture.offset if capture is not None else 0
            self.finish(uid, end, {"state": ExchangeState.INTERRUPTED, "error": why})
        self.live.flush()
        self.writer.close()
        # After the writer: the final counts include what it gave up on.
        saved = self.reporter.stop() or not self.reporter.active
        final = FinalCounts(
            **dataclasses.asdict(self.counts()),
            saved=saved,
            active=self.reporter.active,
            last_failure=self.reporter.last_failure,
        )
        self.store.close()
        return final


def tune_gc() -> None:
    """Fewer, cheaper collections: what exists after start-up (modules, the store's
    engine and metadata) lives as long as the process, so collections skip it."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLD)


def report(worker: RecordWorker, channel: Channel, stop: threading.Event) -> None:
    """What is stored so far, twice a second: if this process dies, the proxy still knows."""
    while not stop.wait(REPORT_EVERY):
        channel.send(Report.WRITES, worker.work.report(worker.ledger.pending))
        if not channel.send(Report.COUNTS, worker.counts()):
            return


def main() -> int:
    # Ctrl-C and `kill` of the process group reach this process too: the proxy decides
    # when recording ends (it closes the pipe), so nothing in flight is cut short.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # The channel to the proxy is a private copy of stdout; stray prints go to stderr.
    channel = Channel(os.fdopen(os.dup(1), "wb"))
    os.dup2(2, 1)
    root = logging.getLogger()
    root.handlers[:] = [_Forward(channel)]
    root.setLevel(logging.INFO)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    inp = os.fdopen(0, "rb", buffering=1 << 20)
    batches = read_frames(inp)
    first = next(batches, None)
    if not first or not isinstance(first[0], Configure):
        log.error("ssetape: the recording process was not configured first; exiting")
        return 2
    try:
        worker = RecordWorker(first[0].config)
        # Which exchanges' ends are stored: those it was sent and never confirms are lost
        # if it dies. The counts follow at once, so that a proxy that waits for the ends
        # (a settle, recording.control) knows what they cost.
        worker.on_stored = lambda uids: (
            channel.send(Report.DONE, uids) and channel.send(Report.COUNTS, worker.counts())
        )
        worker.on_figures = lambda figures: figures and channel.send(Report.STORED, figures)
        worker.start()
    except Exception as e:
        log.error("ssetape: the recording process cannot start: %s", one_line(e))
        return 1
    # When CPU is short, relaying comes first: this process catches up when the proxy idles
    # (what it cannot hold is dropped and counted, never the traffic slowed). Only now:
    # starting it (the store opened) is what the proxy's start waits for.
    os.nice(NICE)
    tune_gc()
    channel.send(Report.READY, worker.recorder_id)  # its rows in the store carry this id
    reporting = threading.Event()
    threading.Thread(target=report, args=(worker, channel, reporting), daemon=True).start()
    for batch in batches:
        worker.handle_batch(batch)
        if worker.closed:
            break
    if not worker.closed and len(sys.argv) > 1:
        # Its stdin ended early: the proxy gave up on what this process did not take in
        # time and tells, on the other pipe, what that was (nothing if it was killed).
        with os.fdopen(int(sys.argv[1]), "rb") as control:
            for batch in read_frames(control):
                worker.handle_batch(batch)
    final = worker.stop()
    reporting.set()
    channel.send(Report.WRITES, worker.work.report(0))
    channel.send(Report.FINAL, final)  # if the proxy is gone, the run row holds the same counts
    return 0


if __name__ == "__main__":
    sys.exit(main())
