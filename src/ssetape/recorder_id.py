"""Recorder ids (``hostname:pid:unix_time``): made, read and checked for life in one place.

Every exchange row names the recording process that wrote it, and ``recorder_runs`` keeps one
row per id. Whether the process behind an id still runs is an operating-system question
(``/proc`` on Linux), asked when the store decides whether a ``recording`` row was abandoned.
"""

from __future__ import annotations

import os
import socket
import time
from typing import NamedTuple

__all__ = ["RecorderId"]


class RecorderId(NamedTuple):
    host: str
    pid: int
    started: int  # Unix time, seconds: after the process started

    @classmethod
    def current(cls) -> RecorderId:
        """The id of this process, made now."""
        return cls(socket.gethostname(), os.getpid(), int(time.time()))

    @classmethod
    def parse(cls, recorder: str) -> RecorderId | None:
        """The parts of ``recorder``, None for anything not made by :meth:`current`."""
        host, _, rest = recorder.partition(":")
        pid, _, started = rest.partition(":")
        if not (host and pid.isdigit() and started.isdigit()):
            return None
        return cls(host, int(pid), int(started))

    def __str__(self) -> str:
        return f"{self.host}:{self.pid}:{self.started}"

    def alive(self) -> bool:
        """Whether the process that made this id runs (ask only on its own host)."""
        return pid_alive(self.pid, self.started)


def _proc_stat(pid: int) -> tuple[bytes, float] | None:
    """State letter and start time (Unix time) of ``pid``, from /proc; None without /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        with open("/proc/stat", "rb") as f:
            btime = next(int(line.split()[1]) for line in f if line.startswith(b"btime "))
    except (OSError, StopIteration, ValueError):
        return None
    # Fields after the command name, which may itself hold spaces and parentheses: the
    # state is field 3 of the line, starttime field 22 (clock ticks since boot).
    fields = stat[stat.rindex(b")") + 2 :].split()
    return fields[0], btime + int(fields[19]) / os.sysconf("SC_CLK_TCK")


def pid_alive(pid: int, since: int) -> bool:
    """Whether ``pid`` is the process that made a recorder id at time ``since``."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # someone else's process: it exists
    stat = _proc_stat(pid)
    if stat is None:
        return True
    state, start = stat
    # A zombie is dead, its parent just has not reaped it. The id is made after the
    # process starts, so one started later reused the pid (btime is coarse: 2 s slack).
    return state != b"Z" and start <= since + 2
