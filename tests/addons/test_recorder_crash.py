"""Recorders that stop mid-stream.

`kill -9` of a real `ssetape record`: its recording process stores all it was handed and
marks the exchange ``interrupted``. `kill -9` of both: nothing but the last flush is lost,
the store opens cleanly, and the next recorder marks the orphaned exchange ``interrupted``.
SIGTERM while the store is down: the recorder waits for it, keeps what came and marks it
``interrupted``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import orjson
import pytest
from mitmproxy import http
from sqlalchemy import text

from ssetape.addons.recorder import MOVED, STOPPED, Recorder
from ssetape.framing.sse import SseParser
from ssetape.recording.link import FLUSH_DELAY
from ssetape.recording.worker import PROXY_GONE
from ssetape.simulator.simulator import Simulator
from ssetape.storage.models import Event, Exchange
from ssetape.storage.queries import Queries
from ssetape.storage.runs import INTERRUPTED, Runs
from ssetape.storage.store import Store
from tests.addons.stores import (
    Recorders,
    kill9,
    kill9_all,
    pg_database,
    store_target,
    wait_for,
)
from tests.conftest import Proc

# Long enough (~10 s at the test simulator's speed) to be killed in the middle.
LONG = {
    "model": "sim-plain",
    "stream": True,
    "max_tokens": 1000,
    "messages": [{"role": "user", "content": "a long answer please"}],
}
FLUSH_WINDOW = 0.1  # the writer commits at least this often (issue: "at most the last 100 ms")
# ...and a commit then takes its own time: on a loaded 2-core machine a PostgreSQL commit
# started just before the kill lost 8 events (120 ms) past the window. The loss stays bounded.
COMMIT_SLACK = 0.15


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with store_target(request.param, tmp_path) as target:
        yield target


class Reader(threading.Thread):
    """Reads one stream, noting when each complete SSE event arrived."""

    def __init__(self, url: str, body: dict[str, object] = LONG) -> None:
        super().__init__(daemon=True)
        self.url, self.request = url, orjson.dumps(body)
        self.body = bytearray()
        self.arrivals: list[float] = []

    def run(self) -> None:
        parser = SseParser()
        try:
            with (
                httpx.Client(timeout=30) as c,
                c.stream("POST", self.url, content=self.request) as r,
            ):
                for chunk in r.iter_raw():
                    now = time.time()
                    self.body += chunk
                    self.arrivals += [now] * len(parser.feed(chunk))
        except httpx.HTTPError:
            pass  # the proxy was killed: expected


def kill_mid_stream(
    sim: Simulator, recorders: Recorders, db: str, kill: Callable[[Proc], float]
) -> tuple[Store, Exchange, list[Event], Reader, float]:
    """A long stream through a recorder that ``kill`` ends; the store and what it holds."""
    proc = recorders.start(db, "--mode", f"reverse:{sim.url}")
    reader = Reader(proc.url + "/v1/chat/completions")
    reader.start()
    wait_for(lambda: len(reader.arrivals) >= 40)
    time.sleep(0.3)
    killed_at = kill(proc)
    reader.join(30)
    store = Store.open(db, create=False)  # opens (and migrates) cleanly after the crash
    if store.is_sqlite:
        with store.engine.connect() as conn:
            assert conn.execute(text("PRAGMA integrity_check")).scalar() == "ok"
    [x] = wait_for(lambda: [x for x in Queries(store).exchanges() if x.state != "recording"] or
                   (kill is kill9_all and Queries(store).exchanges()))  # fmt: skip
    events = list(Queries(store).events(x.id))
    assert bytes(reader.body).startswith(b"".join(e.raw for e in events))
    assert [e.seq for e in events] == list(range(len(events))) and x.event_count == len(events)
    offsets = [e.offset_us for e in events]
    assert offsets == sorted(offsets)
    # Every event the client had a flush window (and a commit's time) before the kill was
    # committed: the recorder saw it no later than the client did.
    due = sum(1 for t in reader.arrivals if t <= killed_at - FLUSH_WINDOW - COMMIT_SLACK)
    assert len(events) >= due > 0, (len(events), due, len(reader.arrivals))
    return store, x, events, reader, killed_at


def test_kill_9_of_the_proxy_keeps_all_it_relayed(
    sim: Simulator, recorders: Recorders, db: str
) -> None:
    """The recording process outlives the proxy: it stores what it was handed and closes
    the exchange itself, so nothing waits for the next recorder's sweep."""
    store, x, events, reader, killed_at = kill_mid_stream(sim, recorders, db, kill9)
    try:
        assert (x.state, x.error) == ("interrupted", PROXY_GONE)
        # Everything the proxy relayed up to its last hand-over (FLUSH_DELAY) is stored.
        due = sum(1 for t in reader.arrivals if t <= killed_at - FLUSH_DELAY - 0.01)
        assert len(events) >= due, (len(events), due, len(reader.arrivals))
        # Its last act: the run row, with the final counts.
        [run] = wait_for(lambda: [r for r in Runs(store).all() if r.stopped_at is not None])
        assert run.events_recorded == len(events)
    finally:
        store.close()


def test_kill_9_of_proxy_and_recorder_loses_at_most_the_last_flush(
    sim: Simulator, recorders: Recorders, db: str
) -> None:
    store, x, events, _, _ = kill_mid_stream(sim, recorders, db, kill9_all)
    try:
        assert x.state == "recording"
        # The next recorder on this store finds the orphan: its recorder's pid is gone.
        nxt = recorders.start(db, "--mode", f"reverse:{sim.url}")
        wait_for(lambda: Queries(store).exchange(x.id).state == "interrupted")  # type: ignore[union-attr]
        assert Queries(store).exchange(x.id).error == INTERRUPTED  # type: ignore[union-attr]
        assert len(list(Queries(store).events(x.id))) == len(events)
        status = {r["recorder"]: r["status"] for r in Runs(store).totals()["runs"]}
        assert status[x.recorder] == "gone"  # type: ignore[index]
        assert nxt.proc.poll() is None and "running" in status.values()
    finally:
        store.close()


def test_sigterm_mid_stream_while_the_store_is_down(sim: Simulator, recorders: Recorders) -> None:
    """Stopping waits for the store (up to 10 s) while the upstream finishes the stream;
    what mitmproxy still relays after the recorder's ``done`` passes through uncaptured.
    Stopped at once (--drain-timeout 0): a drain would let the stream end first."""
    with pg_database() as pg:
        proc = recorders.start(pg.url, "--mode", f"reverse:{sim.url}", "--drain-timeout", "0")
        reader = Reader(proc.url + "/v1/chat/completions", {**LONG, "max_tokens": 120})
        reader.start()
        wait_for(lambda: len(reader.arrivals) >= 20)
        with pg.down():
            proc.proc.send_signal(signal.SIGTERM)
            time.sleep(1.5)  # the stream (~0.7 s) ends upstream meanwhile
        assert proc.proc.wait(30) == 0, proc.log.decode()
        reader.join(30)
        log = proc.log.decode()
        assert "capture failed" not in log and "cannot write to" in log, log
        with Store.open(pg.url, create=False) as store:
            [x] = Queries(store).exchanges()
            events = list(Queries(store).events(x.id))
            assert x.state == "interrupted"
            assert x.error == "recorder stopped before the exchange ended"
            assert len(events) >= 20
            assert bytes(reader.body).startswith(b"".join(e.raw for e in events))
            [run] = Runs(store).all()
            assert run.stopped_at is not None and run.events_lost == 0


@contextlib.contextmanager
def recording(rec: Recorder, tmp_path: Path) -> Iterator[http.HTTPFlow]:
    """``rec`` loaded in process (real addon, real SQLite in ``tmp_path``), and a flow."""
    with warnings.catch_warnings():  # mitmproxy's test helpers import ldap3 and passlib
        warnings.simplefilter("ignore", DeprecationWarning)
        from mitmproxy.test import taddons, tflow

    with taddons.context(rec) as tctx:
        tctx.configure(rec, ssetape_db=str(tmp_path / "tape.db"))
        yield tflow.tflow()


async def streamed(rec: Recorder, flow: http.HTTPFlow) -> http.HTTPFlow:
    """``flow`` through the recorder's hooks up to an SSE response's headers."""
    from mitmproxy.test import tutils

    await rec.request(flow)
    flow.response = tutils.tresp(headers=[(b"content-type", b"text/event-stream")])
    rec.responseheaders(flow)
    return flow


def test_after_done_the_rest_of_a_stream_bypasses_its_closed_capture(tmp_path: Path) -> None:
    """The deterministic core of the test above, in process: real addon, real SQLite."""

    async def session() -> tuple[Recorder, http.HTTPFlow]:
        rec = Recorder()
        with recording(rec, tmp_path) as flow:
            flow = await streamed(rec, flow)
            assert callable(flow.response.stream)
            assert flow.response.stream(b"data: 1\n\n") == b"data: 1\n\n"
            rec.done()
        return rec, flow

    rec, flow = asyncio.run(session())
    assert flow.response is not None and flow.response.stream is True  # mitmproxy relays as is
    assert rec.exit_line == "ssetape: 1 event in 1 exchange stored, none lost"
    with Store.open(str(tmp_path / "tape.db"), create=False) as store:
        [x] = Queries(store).exchanges()
        assert (x.state, x.event_count) == ("interrupted", 1)


def test_the_stream_callable_hands_on_each_chunk_whatever_recording_does(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The very chunk object goes back to mitmproxy at once, even when handing it to the
    recording process fails: the failure is logged, the traffic never sees it."""

    def broken(uid: str, offset: int, data: bytes) -> None:
        raise RuntimeError("recording is broken")

    async def session() -> list[bool]:
        rec = Recorder()
        with recording(rec, tmp_path) as flow:
            flow = await streamed(rec, flow)
            stream = flow.response.stream
            assert callable(stream) and rec.link is not None
            chunks = [b"data: %d\n\n" % i for i in range(3)]
            same = [stream(chunks[0]) is chunks[0]]
            rec.link.chunk = broken  # type: ignore[method-assign]
            same += [stream(c) is c for c in chunks[1:]]
            rec.done()
        return same

    assert asyncio.run(session()) == [True, True, True]
    assert "cannot record a chunk" in caplog.text and "recording is broken" in caplog.text


def test_a_store_change_at_runtime_never_waits_for_the_old_recording_process(
    tmp_path: Path,
) -> None:
    """``ssetape_db`` changed while a stream is in flight (mitmweb's options editor): the old
    recording process, frozen here, is closed in the background, the loop goes on at once,
    the stream goes on unrecorded and its exchange ends interrupted in the old store."""
    from mitmproxy import ctx
    from mitmproxy.test import tflow

    async def session() -> tuple[float, bool, list[bytes]]:
        rec = Recorder()
        with recording(rec, tmp_path) as flow:
            flow = await streamed(rec, flow)
            assert callable(flow.response.stream) and rec.link is not None
            flow.response.stream(b"data: 1\n\n")
            await asyncio.sleep(5 * FLUSH_DELAY)  # handed over
            old_pid = rec.link.pid
            assert old_pid is not None
            os.kill(old_pid, signal.SIGSTOP)
            try:
                t = time.monotonic()
                ctx.options.update(ssetape_db=str(tmp_path / "new.db"))
                waited = time.monotonic() - t
                passes_through = flow.response.stream is True
                second = await streamed(rec, tflow.tflow())
                assert callable(second.response.stream)
                relayed = [second.response.stream(b"data: %d\n\n" % i) for i in range(2)]
            finally:
                os.kill(old_pid, signal.SIGCONT)
            rec.done()
        for t in threading.enumerate():
            if t.name == "ssetape-retire":
                t.join(30)
        return waited, passes_through, relayed

    waited, passes_through, relayed = asyncio.run(session())
    # Closing it on the loop waited for the frozen process's exit grace (20 s).
    assert waited < 2.0
    assert passes_through and relayed == [b"data: 0\n\n", b"data: 1\n\n"]
    with Store.open(str(tmp_path / "tape.db"), create=False) as store:
        [x] = Queries(store).exchanges()
        assert (x.state, x.event_count, x.error) == ("interrupted", 1, MOVED)
    with Store.open(str(tmp_path / "new.db"), create=False) as store:
        [x] = Queries(store).exchanges()
        assert (x.state, x.event_count, x.error) == ("interrupted", 2, STOPPED)
