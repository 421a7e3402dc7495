"""The proxy's link to its recording process, with a real recording process and real SQLite.

What the proxy's event loop may rely on: handing a chunk over never blocks, even when the
recording process is frozen; past the bound, chunks are dropped and counted and their
exchange says how much it misses and its capture resumes at the next event; everything else
arrives and is stored.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import signal
import time
from pathlib import Path
from typing import Any

from ssetape.framing.framings import Framing
from ssetape.recording.link import RecordLink
from ssetape.recording.worker import FELL_BEHIND
from ssetape.storage.queries import Queries
from ssetape.storage.runs import Runs
from ssetape.storage.store import Store
from tests.addons.stores import wait_for


def sse_chunk(i: int) -> bytes:
    # A new object each time, as on the wire: pickle would send a repeated one only once.
    return b"data: %06d" % i + b"x" * 65_000 + b"\n\n"


def exchange(uid: str) -> dict[str, Any]:
    return {
        "started_at": dt.datetime.now(dt.UTC),
        "method": "POST",
        "scheme": "http",
        "host": "127.0.0.1",
        "port": 9,
        "path": f"/v1/chat/completions/{uid}",
        "query": "",
        "http_version": "HTTP/1.1",
        "request_headers": [],
        "request_body": b"{}",
        "fingerprint": uid,
    }


def stream(link: RecordLink, uid: str) -> None:
    link.begin(uid, exchange(uid))
    link.update(uid, {"status": 200, "is_stream": True})
    link.stream(uid, framing=Framing.SSE, encoding="")


def test_a_frozen_recording_process_never_blocks_the_proxy(tmp_path: Path) -> None:
    db = str(tmp_path / "tape.db")
    Store.open(db).close()  # as the recorder does: it opens and migrates first

    async def session() -> tuple[dict[str, Any] | None, float, int]:
        link = RecordLink(db, max_pending=10_000, active=True, max_buffer=256 * 1024)
        link.start()
        pid = link.pid
        assert pid is not None
        stream(link, "small")
        for i in range(5):
            link.chunk("small", i, b"data: %d\n\n" % i)
        await asyncio.sleep(0.05)
        os.kill(pid, signal.SIGSTOP)
        try:
            stream(link, "big")
            slowest = 0.0
            for i in range(100):  # 6.5 MB: more than the pipe (~3 MB here) and the buffer hold
                t = time.perf_counter()
                link.chunk("big", i * 1000, sse_chunk(i))
                slowest = max(slowest, time.perf_counter() - t)
                await asyncio.sleep(0.002)
            lost = link.lost_events  # one event per chunk here
        finally:
            os.kill(pid, signal.SIGCONT)
        link.finish("big", 100_000, {"state": "completed", "error": None})
        link.finish("small", 100_000, {"state": "completed", "error": None})
        return link.close(), slowest, lost

    final, slowest, lost = asyncio.run(session())
    # Dropping is cheap; not one call waited for the frozen process (a call that did would
    # never return while it is stopped). The margin is for a loaded machine's scheduling.
    assert slowest < 0.25, slowest
    assert 0 < lost < 100
    assert final is not None
    assert final.events_lost == lost and final.capture_failures == 0
    with Store.open(db, create=False) as store:
        rows = {x.path.rsplit("/", 1)[1]: x for x in Queries(store).exchanges()}
        small, big = rows["small"], rows["big"]
        assert (small.state, small.event_count, small.error) == ("completed", 5, None)
        assert big.state == "completed"
        assert big.error == f"{lost * len(sse_chunk(0))} bytes not recorded: {FELL_BEHIND}"
        # Every chunk that was not dropped is there, whole (each is one event), in order.
        events = list(Queries(store).events(big.id))
        assert len(events) == 100 - lost
        assert [e.raw for e in events] == [sse_chunk(e.offset_us // 1000) for e in events]
        assert [e.offset_us for e in events] == sorted(e.offset_us for e in events)
        assert final.events_recorded == 5 + len(events)
        # Replay stops at the first hole: the first chunk index that did not arrive, which
        # is also the seq of the first event after it.
        arrived = {e.offset_us // 1000 for e in events}
        assert big.gap_seq == next(i for i in range(100) if i not in arrived)


def test_without_an_event_loop_everything_is_handed_over_at_once(tmp_path: Path) -> None:
    """Hooks called outside the proxy's loop (tests, shutdown) still record everything."""
    db = str(tmp_path / "tape.db")
    Store.open(db).close()
    link = RecordLink(db, max_pending=1000, active=True)
    link.start()
    assert link.wait_ready(30)  # what `ssetape record` waits for before it says it listens
    stream(link, "a")
    for i in range(50):
        link.chunk("a", i, b"event: n\ndata: %d\n\n" % i)
    link.finish("a", 99, {"state": "completed", "error": None})
    final = link.close()
    assert final is not None and final.events_recorded == 50 and final.events_lost == 0
    with Store.open(db, create=False) as store:
        [x] = Queries(store).exchanges()
        assert [e.data for e in Queries(store).events(x.id)] == [str(i) for i in range(50)]
        assert x.recorder is not None and x.recorder.split(":")[1] != str(os.getpid())


def test_beside_the_replayer_it_starts_with_the_first_exchange(tmp_path: Path) -> None:
    """A replay-only session never starts a recording process, nor touches its tape."""
    db = str(tmp_path / "tape.db")
    Store.open(db).close()
    idle = RecordLink(db, max_pending=1000, active=False)
    idle.start()
    assert idle.wait_ready(0) and idle.pid is None
    final = idle.close()
    assert final is not None and final.active is False and final.events_recorded == 0
    with Store.open(db, create=False) as store:
        assert Queries(store).exchanges() == [] and Runs(store).all() == []

    link = RecordLink(db, max_pending=1000, active=False)
    link.start()
    stream(link, "miss")  # a request the tape did not have, forwarded and recorded
    link.chunk("miss", 5, b"data: {}\n\n")
    assert link.pid is not None  # no event loop here: handed over at once
    link.finish("miss", 9, {"state": "completed", "error": None})
    final = link.close()
    assert final is not None and final.active is True and final.events_recorded == 1
    with Store.open(db, create=False) as store:
        [x] = Queries(store).exchanges()
        assert x.event_count == 1


def test_a_recording_process_that_cannot_start_is_never_waited_for(
    tmp_path: Path, caplog: Any
) -> None:
    link = RecordLink(str(tmp_path / "gone" / "tape.db"), max_pending=1000, active=True)
    link.start()
    t = time.monotonic()
    assert not link.wait_ready(60)
    assert time.monotonic() - t < 30  # it died: no need to wait out the timeout
    link.close()
    assert "the recording process cannot start" in caplog.text


def test_an_exchange_whose_end_was_sent_but_never_stored_counts_as_lost(
    tmp_path: Path, caplog: Any
) -> None:
    """Its finish was handed over, but the recording process died before storing it: lost,
    like the exchanges still streaming; one it did store is not."""
    db = str(tmp_path / "tape.db")
    Store.open(db).close()
    link = RecordLink(db, max_pending=1000, active=True)
    link.start()
    assert link.wait_ready(30)
    pid = link.pid
    assert pid is not None
    for uid in ("stored", "unstored"):
        stream(link, uid)
        link.chunk(uid, 1, b"data: 1\n\n")
        if uid == "unstored":
            os.kill(pid, signal.SIGSTOP)  # it never reads this exchange's end
        link.finish(uid, 2, {"state": "completed", "error": None})
        if uid == "stored":
            with Store.open(db, create=False) as store:
                wait_for(lambda: [x.state for x in Queries(store).exchanges()] == ["completed"])
            time.sleep(0.5)  # its report that the end is stored reaches the proxy
    os.kill(pid, signal.SIGKILL)
    while Path(f"/proc/{pid}").exists():  # until the link has reaped it
        time.sleep(0.01)
    assert link.close() is None  # no final counts from a killed process
    assert link.lost_exchanges == 1
    assert "1 exchange(s) in flight not fully recorded" in caplog.text


def test_chunks_batched_for_a_process_that_died_count_as_the_store_counts_them(
    tmp_path: Path,
) -> None:
    """The recording process dies while chunks of its exchange wait for the next batch: its
    successor never saw that exchange begin, so the proxy counts their events (an event
    split across two chunks is one) instead of handing them to it as strays."""
    db = str(tmp_path / "tape.db")
    Store.open(db).close()

    async def session() -> Any:
        link = RecordLink(db, max_pending=1000, active=True)
        link.start()
        assert link.wait_ready(30)
        pid = link.pid
        assert pid is not None
        stream(link, "cut")
        link.chunk("cut", 1, b"data: 1\n\n")
        link.flush()
        await asyncio.sleep(1.2)  # one that ran a second is started again at once
        with Store.open(db, create=False) as store:
            wait_for(lambda: sum(x.event_count for x in Queries(store).exchanges()) == 1)
        os.kill(pid, signal.SIGKILL)
        while Path(f"/proc/{pid}").exists():  # until the link has reaped it
            await asyncio.sleep(0.01)
        # One flush window: half an event, then its end and one more (2 events, 3 chunks).
        link.chunk("cut", 2, b"data: 2")
        link.chunk("cut", 3, b"\n")
        link.chunk("cut", 4, b"\ndata: 3\n\n")
        link.finish("cut", 5, {"state": "completed", "error": None})
        await asyncio.sleep(0.2)
        assert link.pid not in (None, pid)  # started again for what comes next
        stream(link, "next")
        link.chunk("next", 1, b"data: 1\n\n")
        link.finish("next", 2, {"state": "completed", "error": None})
        await asyncio.sleep(0.2)
        link.detach()
        final = link.close()
        assert final is not None
        return link.retired.totals().plus(final)

    total = asyncio.run(session())
    with Store.open(db, create=False) as store:
        stored = sum(x.event_count for x in Queries(store).exchanges())
    assert (stored, total.events_recorded) == (2, 2)
    assert total.events_lost == 2  # events 2 and 3 of "cut", exactly
    assert total.exchanges_lost == 1
