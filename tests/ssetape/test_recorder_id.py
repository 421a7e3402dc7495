"""Recorder ids: made, read back, and whether the process behind one still runs."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

from ssetape.recorder_id import RecorderId


def test_an_id_reads_back_as_it_was_made() -> None:
    rid = RecorderId.current()
    assert (rid.host, rid.pid) == (socket.gethostname(), os.getpid())
    assert RecorderId.parse(str(rid)) == rid
    assert str(rid) == f"{rid.host}:{rid.pid}:{rid.started}"


def test_what_is_not_an_id() -> None:
    assert RecorderId.parse("h:12:34") == RecorderId("h", 12, 34)
    for bad in ("h:o:st:12:34", "not-an-id", ":1:2", "h:1", "h:x:2", "h:1:-2"):
        assert RecorderId.parse(bad) is None, bad


def test_alive_is_this_process_and_not_a_zombie_nor_a_reused_pid() -> None:
    assert RecorderId.current().alive()
    # A live pid that started after the id was made is another process (pid reused).
    assert not RecorderId(socket.gethostname(), os.getpid(), int(time.time()) - 86_400).alive()
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        rid = RecorderId(socket.gethostname(), zombie.pid, int(time.time()))
        deadline = time.monotonic() + 10
        while rid.alive() and time.monotonic() < deadline:
            time.sleep(0.01)  # exits, and stays a zombie until wait() below
        assert not rid.alive()
    finally:
        zombie.wait()
    assert not rid.alive()  # reaped: gone for good
