"""Recorded timing does not follow the wall clock: a real `ssetape record` under libfaketime
(its wall clock stepped by -1 h or +1 d in the middle of a stream, as an NTP step would; its
monotonic clock left alone) stores offsets that never go back, a duration close to the real
one, and an export that `ssetape import` takes again. Only ``started_at`` is wall-clock. In
process, where libfaketime is not installed: the addon with ``time.time`` stepped."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ssetape.addons.recorder import Recorder
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from tests.addons.stores import Recorders
from tests.addons.test_recorder_crash import recording
from tests.conftest import SSETAPE
from tests.upstreams import read_request, serving

LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1")
EVENTS = 5
GAP = 0.2  # seconds between the events after the step


@pytest.fixture
def stepped_upstream() -> Iterator[tuple[str, threading.Event]]:
    """One SSE event, then (once the test set the event) four more, GAP apart."""
    stepped = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            if read_request(conn, b"") is None:
                return
            conn.sendall(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"transfer-encoding: chunked\r\n\r\n"
            )
            for i in range(EVENTS):
                if i == 1:
                    stepped.wait(10)
                time.sleep(GAP)
                data = b"data: %d\n\n" % i
                conn.sendall(b"%x\r\n%s\r\n" % (len(data), data))
            conn.sendall(b"0\r\n\r\n")

    with serving(serve) as url:
        yield url, stepped


@pytest.mark.skipif(not LIBFAKETIME.exists(), reason="libfaketime is not installed (faketime)")
@pytest.mark.parametrize("step", ["-3600", "+1d"], ids=["back-1h", "forward-1d"])
def test_a_wall_clock_step_mid_stream_leaves_the_timing_alone(
    tmp_path: Path,
    recorders: Recorders,
    stepped_upstream: tuple[str, threading.Event],
    step: str,
) -> None:
    url, stepped = stepped_upstream
    clock = tmp_path / "faketime"
    clock.write_text("+0\n")
    env = {
        "LD_PRELOAD": str(LIBFAKETIME),
        "FAKETIME_TIMESTAMP_FILE": str(clock),
        "FAKETIME_NO_CACHE": "1",  # read at every call: the step applies at once
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",  # an NTP step moves the wall clock only
    }
    db = str(tmp_path / "tape.db")
    proc = recorders.start(db, "--mode", f"reverse:{url}", env=env)
    began = time.monotonic()
    before = dt.datetime.now(dt.UTC)
    with httpx.stream("POST", proc.url + "/v1/chat/completions", json={}, timeout=30) as r:
        chunks = r.iter_raw()
        first = next(chunks)
        clock.write_text(f"{step}\n")  # the recorder's wall clock jumps, mid-stream
        stepped.set()
        body = first + b"".join(chunks)
    elapsed_us = (time.monotonic() - began) * 1e6
    assert body == b"".join(b"data: %d\n\n" % i for i in range(EVENTS))
    assert proc.stop() == 0, proc.log.decode()

    with Store.open(db, create=False) as store:
        [x] = Queries(store).exchanges()
        offsets = [e.offset_us for e in Queries(store).events(x.id)]
    assert x.state == "completed" and len(offsets) == EVENTS
    assert x.ttfb_us is not None and x.duration_us is not None
    assert 0 <= x.ttfb_us <= offsets[0]
    assert offsets == sorted(offsets)
    # After the step the events keep the upstream's pace (GAP apart), neither an hour back
    # nor a day ahead, and the exchange lasted what the client saw.
    after = offsets[-1] - offsets[1]
    assert 0.5 * (EVENTS - 2) * GAP * 1e6 < after < elapsed_us, offsets
    assert offsets[-1] <= x.duration_us <= elapsed_us
    assert x.duration_us >= (EVENTS - 1) * GAP * 1e6
    # The start is wall-clock, read once, before the step.
    assert abs((x.started_at - before).total_seconds()) < 60

    cassette = tmp_path / "tape.jsonl"
    again = tmp_path / "again.db"
    for argv in (
        ["export", "--db", db, "-o", str(cassette)],
        ["import", "--db", str(again), str(cassette)],
    ):
        done = subprocess.run(
            [SSETAPE, *argv], capture_output=True, text=True, timeout=60, cwd=tmp_path,
            env=os.environ,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
    with Store.open(str(again), create=False) as store:
        [y] = Queries(store).exchanges()
        assert [e.offset_us for e in Queries(store).events(y.id)] == offsets
        assert y.duration_us == x.duration_us


@pytest.mark.parametrize("step", [-3600.0, 86400.0], ids=["back-1h", "forward-1d"])
def test_in_process_a_stepped_time_time_moves_no_offset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: float
) -> None:
    from mitmproxy.test import tutils

    wall = time.time

    async def session() -> None:
        rec = Recorder()
        with recording(rec, tmp_path) as flow:
            flow.request.timestamp_end = time.time()  # the request is whole: now
            await rec.request(flow)
            flow.response = tutils.tresp(headers=[(b"content-type", b"text/event-stream")])
            flow.response.timestamp_start = time.time()
            rec.responseheaders(flow)
            stream = flow.response.stream
            assert callable(stream)
            stream(b"data: 0\n\n")
            monkeypatch.setattr(time, "time", lambda: wall() + step)  # NTP steps the clock
            await asyncio.sleep(0.05)
            stream(b"data: 1\n\n")
            flow.response.timestamp_end = time.time()
            rec.response(flow)
            rec.done()

    began = time.monotonic()
    asyncio.run(session())
    elapsed_us = (time.monotonic() - began) * 1e6
    with Store.open(str(tmp_path / "tape.db"), create=False) as store:
        [x] = Queries(store).exchanges()
        offsets = [e.offset_us for e in Queries(store).events(x.id)]
    assert x.state == "completed" and x.duration_us is not None and x.ttfb_us is not None
    assert 0 <= x.ttfb_us <= offsets[0] <= offsets[1] <= x.duration_us <= elapsed_us
    assert offsets[1] - offsets[0] >= 40_000  # the 50 ms that passed, not the step
