"""The recorder's run row and exit line in a normal session, and no row from a replay."""

from __future__ import annotations

import re
from collections.abc import Callable

import httpx

from ssetape.simulator.simulator import Simulator
from ssetape.storage.queries import Queries
from ssetape.storage.runs import Runs
from ssetape.storage.store import Store
from tests.addons.test_recorder import CHAT, raw_stream
from tests.conftest import Proc


def test_clean_session_counts_and_a_replay_leaves_no_run(
    sim: Simulator, ssetape_proc: Callable[..., Proc]
) -> None:
    rec = ssetape_proc("record", "--mode", f"reverse:{sim.url}")
    _, body = raw_stream(rec.url, "/v1/chat/completions", CHAT)
    assert rec.stop() == 0
    m = re.search(rb"ssetape: (\d+) events in 1 exchange stored, none lost\n", rec.log)
    assert m, rec.log.decode()

    with Store.open(rec.db, create=False) as store:
        [run] = Runs(store).all()
        x = Queries(store).exchanges()[0]
        assert run.recorder == x.recorder
        assert (run.exchanges_recorded, run.events_recorded) == (1, int(m.group(1)))
        assert run.events_recorded == x.event_count > 0
        assert (run.events_lost, run.exchanges_lost, run.store_errors) == (0, 0, 0)
        assert run.stopped_at is not None and run.last_error is None
        assert Runs(store).status(run) == "stopped"

    # Replaying through mitmproxy loads the recorder too; serving from the tape must not
    # write to it (a cassette checked into a repository stays unchanged).
    rep = ssetape_proc("replay")
    with httpx.Client(proxy=rep.url, timeout=30) as c:
        r = c.post(sim.url + "/v1/chat/completions", json=CHAT)
        assert r.content == body
    assert rep.stop() == 0
    # It says what it served, and nothing about recording.
    said = rep.log.replace(b"ssetape replay: ", b"").replace(b"ssetape: replayed 1, missed 0", b"")
    assert b"ssetape: " not in said
    with Store.open(rec.db, create=False) as store:
        assert [r.recorder for r in Runs(store).all()] == [run.recorder]
