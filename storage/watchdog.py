"""A client-side deadline on the writer's statements (PostgreSQL).

The server enforces ``statement_timeout`` and ``lock_timeout`` (see ``Store.open``'s
``deadline``), but a network path that hangs without refusing (a dead route, a frozen relay)
never lets the server's answer arrive: the driver would wait forever inside a read. The
watchdog shuts the connection's socket down once a statement has run past its deadline, so
the blocked call fails, the writer counts a failure, and its retry opens a fresh connection.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["Watchdog"]

log = logging.getLogger("ssetape.storage")


class Watchdog:
    def __init__(self, deadline: float, *, tick: float = 0.25) -> None:
        self.deadline = deadline
        self._tick = tick
        self._lock = threading.Lock()
        self._since: float | None = None
        self._fd: int | None = None
        self._stop = threading.Event()
        self.fired = 0
        threading.Thread(target=self._run, name="ssetape-watchdog", daemon=True).start()

    @contextlib.contextmanager
    def watching(self) -> Iterator[Callable[[Any], None]]:
        """Time the block; inside it, call what it yields with the DBAPI connection the
        block uses (its commit too: close the block after the transaction's)."""

        def attach(driver_connection: Any) -> None:
            fileno = getattr(driver_connection, "fileno", None)
            with self._lock:
                self._fd = fileno() if fileno is not None else None

        with self._lock:
            self._since, self._fd = time.monotonic(), None
        try:
            yield attach
        finally:
            with self._lock:
                self._since = self._fd = None

    def close(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self._tick):
            with self._lock:
                late = self._since is not None and time.monotonic() - self._since > self.deadline
                fd = self._fd if late else None
                if late:
                    self._since = None  # once per statement
            if fd is not None:
                self._cut(fd)

    def _cut(self, fd: int) -> None:
        self.fired += 1
        log.warning(
            "ssetape storage: a write got no answer from the database in %g s; its "
            "connection is dropped and the write retried",
            self.deadline,
        )
        try:
            # A duplicate descriptor of the same socket: shutting it down breaks the
            # connection for the driver's descriptor too, which stays the driver's to close.
            with socket.socket(fileno=os.dup(fd)) as sock:
                sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # it closed meanwhile: nothing left to cut
