"""`kill -9` of a real `ssetape record` mid-stream: nothing but the last flush is lost, the
store opens cleanly, and the next recorder marks the orphaned exchange ``interrupted``."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
from sqlalchemy import text
from ssetape.storage.runs import INTERRUPTED, Runs
from ssetape.storage.store import Store

from ssetape.simulator import Simulator
from ssetape.sse import SseParser
from tests.addons.stores import Recorders, kill9, store_target, wait_for

# Long enough (~10 s at the test simulator's speed) to be killed in the middle.
LONG = {
    "model": "sim-plain",
    "stream": True,
    "max_tokens": 1000,
    "messages": [{"role": "user", "content": "a long answer please"}],
}
FLUSH_WINDOW = 0.1  # the writer commits at least this often (issue: "at most the last 100 ms")


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with store_target(request.param, tmp_path) as target:
        yield target


@pytest.fixture
def recorders(tmp_path: Path, confdir: Path) -> Iterator[Recorders]:
    r = Recorders(tmp_path, confdir)
    yield r
    r.stop_all()


class Reader(threading.Thread):
    """Reads one stream, noting when each complete SSE event arrived."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.body = bytearray()
        self.arrivals: list[float] = []

    def run(self) -> None:
        parser = SseParser()
        try:
            with (
                httpx.Client(timeout=30) as c,
                c.stream("POST", self.url, content=orjson.dumps(LONG)) as r,
            ):
                for chunk in r.iter_raw():
                    now = time.time()
                    self.body += chunk
                    self.arrivals += [now] * len(parser.feed(chunk))
        except httpx.HTTPError:
            pass  # the proxy was killed: expected


def test_kill_9_mid_stream_loses_at_most_the_last_flush(
    sim: Simulator, recorders: Recorders, db: str
) -> None:
    proc = recorders.start(db, "--mode", f"reverse:{sim.url}")
    reader = Reader(proc.url + "/v1/chat/completions")
    reader.start()
    wait_for(lambda: len(reader.arrivals) >= 40)
    time.sleep(0.3)
    killed_at = kill9(proc)
    reader.join(30)
    received = bytes(reader.body)

    store = Store.open(db, create=False)  # opens (and migrates) cleanly after the crash
    try:
        if store.is_sqlite:
            with store.engine.connect() as conn:
                assert conn.execute(text("PRAGMA integrity_check")).scalar() == "ok"
        [x] = store.exchanges()
        assert x.state == "recording", proc.log.decode()
        events = store.events(x.id)
        stored = b"".join(e.raw for e in events)
        assert received.startswith(stored)
        assert [e.seq for e in events] == list(range(len(events)))
        # Every event the client had FLUSH_WINDOW before the kill was committed: the
        # recorder saw it no later than the client did.
        due = sum(1 for t in reader.arrivals if t <= killed_at - FLUSH_WINDOW)
        assert len(events) >= due > 0, (len(events), due, len(reader.arrivals))
        assert x.event_count == len(events)

        # The next recorder on this store finds the orphan: its recorder's pid is gone.
        nxt = recorders.start(db, "--mode", f"reverse:{sim.url}")
        wait_for(lambda: store.exchange(x.id).state == "interrupted")  # type: ignore[union-attr]
        assert store.exchange(x.id).error == INTERRUPTED  # type: ignore[union-attr]
        assert len(store.events(x.id)) == len(events)
        status = {r["recorder"]: r["status"] for r in Runs(store).totals()["runs"]}
        assert status[x.recorder] == "gone"  # type: ignore[index]
        assert nxt.proc.poll() is None and "running" in status.values()
    finally:
        store.close()
