"""One recording process, seen from the proxy: its pipe, its reports, and what it holds.

:class:`~ssetape.recording.link.RecordLink` starts one, writes to its stdin and, when it
dies, counts what it held; the reports come in on a thread of its own.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any

from ssetape.recording.protocol import (
    Counts,
    FinalCounts,
    Message,
    Report,
    decode_report,
    encode_frame,
)

__all__ = ["PIPE_SIZE", "Child", "Listeners"]

log = logging.getLogger("ssetape.recorder")

PIPE_SIZE = 1 << 20
CONTROL_SIZE = 256 << 10  # room for where a few thousand streams break off


# The reports a link's listeners hear (the proxy's metrics, ssetape.telemetry).
HEARD = frozenset({Report.STORED, Report.WRITES})


class Listeners:
    """Who hears what a link's recording processes report beside their counts: each is
    called with the report's kind and value on the thread that reads the reports, so it
    must be quick; any thread may add or remove one."""

    def __init__(self) -> None:
        self._each: tuple[Callable[[Report, Any], object], ...] = ()

    def add(self, listener: Callable[[Report, Any], object]) -> None:
        self._each = (*self._each, listener)

    def remove(self, listener: Callable[[Report, Any], object]) -> None:
        self._each = tuple(x for x in self._each if x != listener)

    def __call__(self, kind: Report, value: Any) -> None:
        for listener in self._each:
            try:
                listener(kind, value)
            except Exception:  # a listener's bug must not stop the reports being read
                log.exception("ssetape: a listener of the recording process's reports failed")


class Child:
    """One recording process and the thread that reads its reports."""

    def __init__(self, listeners: Listeners | None = None) -> None:
        self.listeners = listeners or Listeners()
        # Its other pipe, for the last word only: when it did not take the rest of stdin in
        # time, what it will never get (see RecordLink.close). Empty until then, so that
        # word never waits behind the backlog.
        tell, self._control = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "ssetape.recording.worker", str(tell)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                pass_fds=(tell,),
            )
        except BaseException:
            os.close(self._control)
            raise
        finally:
            os.close(tell)
        os.set_blocking(self._control, False)
        with contextlib.suppress(OSError, AttributeError):
            fcntl.fcntl(self._control, fcntl.F_SETPIPE_SZ, CONTROL_SIZE)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin = self.proc.stdin
        self.fd = self.stdin.fileno()
        os.set_blocking(self.fd, False)
        with contextlib.suppress(OSError, AttributeError):  # Linux only; the default works
            fcntl.fcntl(self.fd, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
        self.started = time.monotonic()
        self.open: set[str] = set()  # exchanges it has begun and not finished
        # Exchanges whose finish it was sent but has not yet reported committed: if it dies
        # now, they are lost too (their end never reached the store).
        self.finishing: set[str] = set()
        self.final: FinalCounts | None = None
        self.counts = Counts()  # its latest report of what it stored
        self._counted = True  # ``counts`` came after the latest DONE report
        self.recorder_id: str | None = None  # from its ready report
        self.handed = 0  # events in the chunks handed to it
        self.told = 0  # events the proxy lost and told it of
        self.done = 0  # exchanges whose end it reported committed (DONE)
        self.ended = threading.Event()  # its stdout closed: it has exited or is exiting
        self.ready = threading.Event()  # it has opened the store
        self.reader = threading.Thread(
            target=self._read, args=(self.proc.stdout,), name="ssetape-link", daemon=True
        )
        self.reader.start()

    def tell(self, batch: list[Message]) -> bool:
        """Write ``batch`` on its other pipe, whole or not at all; False if it does not fit."""
        frame = encode_frame(batch)
        try:
            room = fcntl.fcntl(self._control, fcntl.F_GETPIPE_SZ)
        except (OSError, AttributeError):  # Linux only: elsewhere, what POSIX guarantees
            room = 512
        if len(frame) > room:
            return False
        try:
            return os.write(self._control, frame) == len(frame)  # an empty pipe: whole
        except OSError:
            return False

    def settled(self) -> bool:
        """Every exchange it was handed has its end committed, and ``counts`` says so."""
        return not self.open and not self.finishing and self._counted

    def close_control(self) -> None:
        """Its other pipe ends here: it reads that after its stdin ends."""
        if self._control >= 0:
            with contextlib.suppress(OSError):
                os.close(self._control)
            self._control = -1

    def _read(self, out: IO[bytes]) -> None:
        try:
            for line in out:
                try:
                    kind, value = decode_report(line)
                except ValueError as e:
                    # Its stray prints go to stderr: this is a bug or a version mismatch.
                    log.error("ssetape: the recording process sent %s", e)
                    continue
                if kind is Report.LOG:
                    name, level, text = value
                    logging.getLogger(name).log(level, text)
                elif kind is Report.COUNTS:
                    self.counts = value
                    self._counted = True
                elif kind is Report.DONE:
                    self._counted = False
                    self.done += len(value)
                    self.finishing.difference_update(value)
                elif kind in HEARD:
                    self.listeners(kind, value)
                elif kind is Report.FINAL:
                    self.final = value
                elif kind is Report.READY:
                    self.recorder_id = value if isinstance(value, str) else None
                    self.ready.set()
        finally:
            self.proc.wait()  # reaped here, off the event loop
            self.ended.set()
