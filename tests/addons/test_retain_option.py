"""``ssetape_retain``: the recorder's retention options, checked in ``configure`` (in process,
``mitmproxy.test.taddons``) and honoured by a real `ssetape record`, whose recording process
prunes its store on a schedule while it records."""

from __future__ import annotations

import warnings
from pathlib import Path

import httpx
import orjson
import pytest
from mitmproxy import exceptions

from ssetape.addons.recorder import Recorder
from ssetape.recording.protocol import RetentionPolicy
from ssetape.simulator.simulator import Simulator
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from tests.addons.stores import Recorders, store_target, wait_for
from tests.ssetape.recording.test_retention import DAY, EVENTS, fill, kept


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"ssetape_retain": "soon"}, "ssetape_retain: 'soon' is not a duration like 30d"),
        ({"ssetape_retain": "30"}, "ssetape_retain: '30' is not a duration like 30d"),
        ({"ssetape_retain": "2026-01-01"}, r"ssetape_retain: '2026-01-01' .* \(a date;"),
        ({"ssetape_retain": "0s"}, "ssetape_retain: '0s' is shorter than 1 s"),
        ({"ssetape_retain_events": "-1d"}, "ssetape_retain_events: '-1d' is not a duration"),
        ({"ssetape_retain_every": "0.5s"}, "ssetape_retain_every: '0.5s' is shorter than 1 s"),
        (
            {"ssetape_retain": "7d", "ssetape_retain_events": "30d"},
            r"ssetape_retain_events: '30d' must be shorter than ssetape_retain \('7d'\)",
        ),
        (
            {"ssetape_retain": "7d", "ssetape_retain_events": "7d"},
            "ssetape_retain_events: '7d' must be shorter than ssetape_retain",
        ),
        (
            {"ssetape_retain": "30d", "ssetape_retain_every": ""},
            "ssetape_retain_every: empty; give a duration like 1h",
        ),
    ],
)
def test_a_bad_retention_is_a_one_line_option_error(
    tmp_path: Path, options: dict[str, str], error: str
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from mitmproxy.test import taddons

    rec = Recorder()
    with taddons.context(rec) as tctx:
        tctx.configure(rec, ssetape_db=str(tmp_path / "tape.db"))
        link = rec.link
        with pytest.raises(exceptions.OptionsError, match=error) as raised:
            tctx.configure(rec, **options)
        assert "\n" not in str(raised.value)
        # The old values are back and recording goes on as it was, pruning nothing.
        assert tctx.options.ssetape_retain == "" and tctx.options.ssetape_retain_every == "1h"
        assert rec.link is link and link is not None and link.retention is None
        rec.done()


def test_the_retention_options_reach_the_recording_process(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from mitmproxy.test import taddons

    rec = Recorder()
    with taddons.context(rec) as tctx:
        tctx.configure(rec, ssetape_db=str(tmp_path / "tape.db"))
        assert rec.link is not None and rec.link.retention is None
        first = rec.link
        tctx.configure(rec, ssetape_retain="30d", ssetape_retain_events=" 36h ")
        # A new recording process, configured to prune (its config is fixed at its start).
        assert rec.link is not first and rec.link is not None
        assert rec.link.retention == RetentionPolicy(
            exchanges=30 * DAY, events=1.5 * DAY, every=3600
        )
        tctx.configure(rec, ssetape_retain="", ssetape_retain_events="2w")
        assert rec.link.retention == RetentionPolicy(events=14 * DAY, every=3600)
        tctx.configure(rec, ssetape_retain_events="")
        assert rec.link.retention is None
        rec.done()


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_ssetape_record_prunes_old_exchanges_and_records_new_ones(
    sim: Simulator, recorders: Recorders, tmp_path: Path, kind: str
) -> None:
    with store_target(kind, tmp_path) as db:
        with Store.open(db) as store:
            fill(store, {"old1": 40, "old2": 31, "old3": 365, "recent": 2})
        proc = recorders.start(
            db,
            "--mode",
            f"reverse:{sim.url}",
            "--set",
            "ssetape_retain=30d",
            "--set",
            "ssetape_retain_every=1s",  # the first run too: no 5 s wait in a test
        )
        with Store.open(db, create=False) as store:
            wait_for(lambda: kept(store) == {"recent": EVENTS}, timeout=20)
        body = orjson.dumps(
            {
                "model": "sim-chat",
                "stream": True,
                "max_tokens": 5,
                "messages": [{"role": "user", "content": "after the prune"}],
            }
        )
        with httpx.Client(timeout=30) as client:
            r = client.post(proc.url + "/v1/chat/completions", content=body)
            assert r.status_code == 200 and b"data:" in r.content
        assert proc.stop() == 0, proc.log.decode()
        # One line for the run that removed something (the later runs found nothing).
        said = [line for line in proc.log.decode().splitlines() if "retention" in line]
        assert (
            len(said) == 1
            and "ssetape: retention: pruned 3 exchange(s) started before" in (said[0])
        ), proc.log.decode()
        with Store.open(db, create=False) as store:
            rows = {x.uid: x for x in Queries(store).exchanges()}
            [new] = [x for uid, x in rows.items() if uid != "recent"]
            assert len(rows) == 2 and "recent" in rows
            assert new.state == "completed" and new.request_body == body
            assert len(list(Queries(store).events(new.id))) == new.event_count > 0
