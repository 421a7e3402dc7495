"""Events lost on purpose: the exit line, ``ssetape stats --runs`` and the store agree.

The recording process is stopped (SIGSTOP) while a 4 MB stream passes a proxy allowed 1 MB
of backlog and 1,000 queued rows: the proxy drops what it cannot hold and tells the recording
process, whose writer may drop more. One ledger in the recording process holds every count,
so the three places say the same, and stored + lost is what the client got.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import orjson

from ssetape.storage.queries import Queries
from ssetape.storage.runs import Runs
from ssetape.storage.store import Store
from tests.addons.stores import Recorders, recording_process
from tests.addons.test_recorder_stop import EXIT, HEAD, received, sse_events
from tests.conftest import SSETAPE
from tests.upstreams import fixed_upstream

EVENTS = 20_000


def test_a_backlog_overflow_is_counted_once_and_alike_everywhere(
    recorders: Recorders, tmp_path: Path
) -> None:
    db = str(tmp_path / "tape.db")
    with fixed_upstream(HEAD, sse_events(EVENTS)) as upstream:
        proc = recorders.start(
            db, "--mode", f"reverse:{upstream}", "--set", "ssetape_max_pending=1000"
        )
        child = recording_process(proc)
        got: list[int] = []
        client = threading.Thread(target=lambda: got.append(received(proc.url)[0]))
        os.kill(child, signal.SIGSTOP)
        try:
            client.start()
            client.join(60)
            time.sleep(0.5)  # the proxy's last batches meet the full backlog too
        finally:
            os.kill(child, signal.SIGCONT)
        assert got == [EVENTS]
        assert proc.stop() == 0, proc.log.decode()
    log = proc.log.decode()
    m = EXIT.search(log)
    assert m, log
    stored, exchanges, lost, lost_exchanges = map(int, m.groups())
    assert lost > EVENTS // 2, log  # most of it never reached the recording process
    assert stored + lost == EVENTS, log
    with Store.open(db, create=False) as store:
        [x] = Queries(store).exchanges()
        rows = len(list(Queries(store).events(x.id)))
        [run] = Runs(store).all()
    assert (stored, exchanges) == (rows, 1)
    assert (run.events_recorded, run.events_lost, run.exchanges_lost) == (
        stored,
        lost,
        lost_exchanges,
    )
    runs = orjson.loads(
        subprocess.run(
            [SSETAPE, "stats", "--runs", "--json", "--db", db], capture_output=True, check=True
        ).stdout
    )
    assert (runs["events_recorded"], runs["events_lost"], runs["exchanges_lost"]) == (
        stored,
        lost,
        lost_exchanges,
    )
