"""`ssetape prune` as an operator runs it (issue 26), on SQLite files and PostgreSQL: what it
prints is what left the store, an events-only prune leaves a summary that `list` and `show`
still answer about (and `replay` no longer serves), a real `ssetape record` writing meanwhile
loses nothing, `--vacuum` gives an older SQLite file its space back, mistakes get one line."""

from __future__ import annotations

import datetime as dt
import re
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from click.testing import CliRunner

from ssetape.cli.main import main
from ssetape.simulator.simulator import Simulator
from ssetape.storage.models import Exchange
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from tests.addons.stores import Recorders, store_target
from tests.conftest import Proc
from tests.ssetape.cli.test_cli import assert_one_line_error, run
from tests.storage.test_prune import (
    COUNTED,
    NOW,
    OLD,
    Feed,
    checkpoint,
    counts,
    file_size,
    minus,
    old_tape,
    pragma,
    request_fields,
    snapshot,
)

# The line `ssetape prune` prints (without --json).
LINE = re.compile(
    r"^(?P<verb>pruned|would prune) (?P<what>the events of )?(?P<exchanges>[\d,]+) exchange\(s\) "
    r"started before \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC: (?P<events>[\d,]+) events, "
    r"(?P<chunks>[\d,]+) chunks(?:, (?P<findings>[\d,]+) findings)?"
    r"(?:, in (?P<batches>[\d,]+) batch\(es\))?"
    r"(?: and (?P<days_dropped>[\d,]+) day partition\(s\) dropped whole)?"
    r"(?:; (?P<in_flight>[\d,]+) still recording, kept)?"
    r"(?:; (?P<mb>[\d,.]+) (?P<unit>MB|kB) returned to the file system)?$"
)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """`ssetape ARGS` in this process (a subprocess costs a second each); the one-line error
    checks run the real executable."""
    r = CliRunner().invoke(
        main, list(args), catch_exceptions=False, color=False, terminal_width=100
    )
    return subprocess.CompletedProcess(list(args), r.exit_code, r.stdout, r.stderr)


def prune(db: str, *args: str) -> dict[str, Any]:
    r = cli("prune", "--db", db, "--older-than", "30d", *args, "--json")
    assert r.returncode == 0, r.stderr
    doc: dict[str, Any] = orjson.loads(r.stdout)
    return doc


def prune_line(db: str, *args: str) -> dict[str, int]:
    r = cli("prune", "--db", db, "--older-than", "30d", *args)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 1, r.stdout
    m = LINE.match(lines[0])
    assert m is not None, lines[0]
    return {k: int(v.replace(",", "")) for k, v in m.groupdict().items()
            if v is not None and k not in ("verb", "what", "mb", "unit")}  # fmt: skip


def counted(doc: dict[str, Any]) -> dict[str, int]:
    return {k: doc[k] for k in COUNTED}


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store as `--db` names it: an SQLite file path, or a PostgreSQL URL (a fresh schema;
    skipped without SSETAPE_TEST_PG_URL)."""
    with store_target(request.param, tmp_path) as target:
        yield target


def test_what_prune_prints_is_what_left_the_store(db: str) -> None:
    with Store.open(db) as store:
        feed = Feed(store)
        old, new, flying = old_tape(feed)  # `flying`: still recording, by this live process
        feed.settle()
        spared = snapshot(store, [*new, flying])
        start = counts(store)
        old_uid = old[1]

        dry = prune(db, "--dry-run")
        assert counts(store) == start, "--dry-run deleted something"
        assert prune_line(db, "--dry-run") == {**counted(dry), "in_flight": 1}
        assert dry["exchanges"] == len(old) and dry["dry_run"] and dry["in_flight"] == 1

        # Events only: the bulk goes, each exchange's summary stays.
        dry_events = prune(db, "--events-only", "--dry-run")
        got = prune(db, "--events-only", "--batch-rows", "30")
        after_events = counts(store)
        assert (
            counted(got)
            == counted(dry_events)
            == minus(start, after_events) | {"exchanges": len(old)}
        )
        assert got["findings"] == 0 and got["in_flight"] == 1 and got["batches"] > 1
        assert after_events["exchanges"] == start["exchanges"]
        assert prune_line(db, "--events-only") == {"exchanges": 0, "events": 0, "chunks": 0,
                                                   "batches": 0, "in_flight": 1}  # fmt: skip
        assert counts(store) == after_events, "a second events-only prune removed more"

        # What an operator still sees of a pruned exchange.
        listed = {x["uid"]: x for x in orjson.loads(cli("list", "--db", db, "--json").stdout)}
        row = listed[old_uid]
        assert (row["model"], row["outcome"], row["state"]) == ("gpt-4o-mini", "completed",
                                                                "completed")  # fmt: skip
        assert row["usage"]["input_tokens"] == 10 and row["usage"]["output_tokens"] == 4
        assert row["cost"]["nusd"] and row["events_pruned_at"] is not None
        shown = cli("show", "--db", db, old_uid)
        assert shown.returncode == 0, shown.stderr
        assert "events pruned" in shown.stdout and "replay skips it" in shown.stdout
        detail = orjson.loads(cli("show", "--db", db, old_uid, "--json").stdout)
        assert detail["events"] == [] and detail["events_pruned_at"] is not None
        assert detail["model"] == "gpt-4o-mini" and detail["usage"]["total_tokens"] == 14
        cut_short = old[0]  # no [DONE]: a finding, kept as the audit trail
        kept = orjson.loads(cli("show", "--db", db, cut_short, "--json").stdout)
        assert "no_terminal_event" in {f["code"] for f in kept["findings"]}

        # Then the summaries go too: text line and store agree, findings counted.
        whole = prune_line(db, "--batch-rows", "5")
        assert whole == {**minus(after_events, counts(store)), "batches": whole["batches"],
                         "in_flight": 1}  # fmt: skip
        assert whole["exchanges"] == len(old) and whole["events"] == 0 and whole["findings"] > 0
        assert snapshot(store, [*new, flying]) == spared, "a newer or in-flight exchange changed"
        assert cli("show", "--db", db, old_uid).returncode == 1
        feed.close()


def chat(url: str, prompt: str) -> bytes:
    body = {
        "model": "gpt-4o-sim",
        "stream": True,
        "messages": [{"role": "user", "content": prompt}],
    }
    r = httpx.post(url + "/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == 200, r.text
    return r.content


def test_replay_no_longer_serves_what_was_pruned(
    tmp_path: Path, ssetape_proc: Callable[..., Proc]
) -> None:
    db = str(tmp_path / "tape.db")
    with Store.open(db) as store:
        feed = Feed(store)
        feed.exchange(OLD, 5, prompt="the old question")
        new = feed.exchange(NOW, 5, prompt="the new question")
        feed.close()
        kept = Queries(store).exchange(new)
        assert kept is not None
        recorded = b"".join(e.raw for e in Queries(store).events(kept.id))

    r = cli("prune", "--db", db, "--older-than", "30d", "--events-only")
    assert r.returncode == 0 and r.stdout.startswith("pruned the events of 1 exchange(s)"), r

    replay = ssetape_proc("replay", "--mode", "reverse:https://api.openai.com", "--speed", "0",
                          db=db)  # fmt: skip
    url = replay.url + "/v1/chat/completions"
    miss = httpx.post(url, content=request_fields(OLD, "the old question", "")["request_body"])
    assert miss.status_code == 404, miss.text
    assert orjson.loads(miss.content)["error"]["code"] == "ssetape_replay_miss"
    hit = httpx.post(url, content=request_fields(NOW, "the new question", "")["request_body"])
    assert hit.status_code == 200 and hit.content == recorded


def test_a_recorder_running_through_a_prune_loses_nothing(
    db: str, sim: Simulator, tmp_path: Path, confdir: Path
) -> None:
    with Store.open(db) as store:
        feed = Feed(store, analyse=False)
        old = [feed.exchange(OLD + dt.timedelta(seconds=i), 10, chunks=i % 2) for i in range(300)]
        feed.close()
        held = counts(store, Exchange.uid.in_(old))

    recorders = Recorders(tmp_path, confdir)
    try:
        rec = recorders.start(db, "--mode", f"reverse:{sim.url}")
        stop = threading.Event()
        answers: list[tuple[float, bytes]] = []

        def client() -> None:  # one client, a stream after another, all through the prune
            k = 0
            while not stop.is_set():
                answers.append((time.monotonic(), chat(rec.url, f"live question {k}")))
                k += 1

        thread = threading.Thread(target=client, daemon=True)
        thread.start()
        while not answers:
            time.sleep(0.05)
        began = time.monotonic()
        pruned = run("prune", "--db", db, "--older-than", "30d", "--batch-rows", "100", "--json")
        ended = time.monotonic()
        stop.set()
        thread.join(30)
        assert rec.stop() == 0, rec.log.decode()
    finally:
        recorders.stop_all()

    assert pruned.returncode == 0, pruned.stderr
    report = orjson.loads(pruned.stdout)
    assert counted(report) == held and report["batches"] > 1
    assert any(began <= t <= ended for t, _ in answers), "nothing recorded during the prune"
    runs = orjson.loads(cli("stats", "--db", db, "--runs", "--json").stdout)
    assert (runs["events_lost"], runs["exchanges_lost"], runs["store_errors"]) == (0, 0, 0)
    with Store.open(db) as store:
        live = [x for x in Queries(store).exchanges() if x.started_at > NOW]
        assert len(live) == len(answers) and {x.state for x in live} == {"completed"}
        for x in live:
            events = list(Queries(store).events(x.id))
            assert len(events) == x.event_count and events[-1].data == "[DONE]"
        assert counts(store)["exchanges"] == len(answers)


def test_an_older_sqlite_store_gives_space_back_only_with_vacuum(tmp_path: Path) -> None:
    path = tmp_path / "tape.db"
    Store.open(str(path)).close()
    with sqlite3.connect(path) as c:  # as stores were made before incremental auto-vacuum
        c.execute("PRAGMA auto_vacuum = NONE")
        c.execute("VACUUM")
    with Store.open(str(path)) as store:
        feed = Feed(store, analyse=False)
        for i in range(130):
            feed.exchange(OLD if i < 110 else NOW, 48, pad=1000)
            if i % 50 == 49:
                feed.settle()
        feed.close()
    checkpoint(path)
    size = file_size(path)
    assert size > 20e6 and pragma(path, "auto_vacuum") == 0

    report = prune(str(path))
    assert report["exchanges"] == 110 and not report["bytes_returned"]
    assert file_size(path) == size, "the file shrank without --vacuum"
    r = cli("prune", "--db", str(path), "--older-than", "30d", "--vacuum")
    assert r.returncode == 0, r.stderr
    m = LINE.match(r.stdout.strip())
    assert m is not None and m["exchanges"] == "0" and m["mb"] is not None, r.stdout
    scale = 1e6 if m["unit"] == "MB" else 1e3
    assert abs(float(m["mb"]) * scale - (size - file_size(path))) < 0.1e6
    assert file_size(path) < size * 0.3
    assert pragma(path, "auto_vacuum") == 2  # later prunes give space back as they go


def test_mistakes_get_one_line(tmp_path: Path) -> None:
    db = tmp_path / "tape.db"
    r = run("prune", "--db", str(db), "--older-than", "nonsense")
    assert r.returncode == 2
    assert_one_line_error(r, "--older-than", "'nonsense'", "30m, 1h, 2d")
    r = run("prune", "--db", str(db), "--older-than", "30d")
    assert r.returncode == 1
    assert_one_line_error(r, "no ssetape database at", str(db))
    assert not db.exists(), "a prune created a store"
    assert cli("prune", "--db", str(db), "--older-than", "30d", "--batch-rows", "0").returncode == 2
    assert cli("prune", "--db", str(db)).returncode == 2  # --older-than is required
