"""What a real `ssetape record` counts when its store goes away in ways that do not refuse.

PostgreSQL behind a relay that drops every byte while the recorder stops: each operation it
could not store is counted lost once. The SQLite store's folder made unreadable for a while
(root without its override of file permissions, as an unprivileged service would run): the
recorder cannot tell whether the file is there, waits, and stores everything once it can.
The file deleted while its folder is immutable (`chattr +i`): what went with it is counted
lost at once, and recording resumes in a new file once one can be made.

Each time stored + lost is what the clients received, in the exit line and the store alike.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from sqlalchemy.engine import make_url

from ssetape.simulator.simulator import Simulator
from ssetape.storage.queries import Queries
from ssetape.storage.runs import Runs
from ssetape.storage.store import Store
from tests.addons.stores import Recorders, pg_database
from tests.addons.test_recorder_failopen import Reader, body
from tests.conftest import Proc, start_ssetape
from tests.relay import Relay

EXIT = re.compile(
    r"ssetape: (\d+) events? in (\d+) exchanges? stored, (?:none lost|(\d+) events? and "
    r"(\d+) exchanges? lost)"
)
# Root without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH: file modes apply to it.
NO_OVERRIDE = ("setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--")


def exit_counts(proc: Proc) -> tuple[int, int, int, int]:
    """(events stored, exchanges stored, events lost, exchanges lost) from the exit line."""
    log = proc.log.decode()
    m = EXIT.search(log)
    assert m, log
    assert "crashed" not in log and "Traceback" not in log, log
    return tuple(int(g or 0) for g in m.groups())  # type: ignore[return-value]


def run_all(proc: Proc, first: int, n: int, tokens: int = 20) -> list[Reader]:
    readers = [Reader(proc.url, body(i, tokens)) for i in range(first, first + n)]
    for r in readers:
        r.run()
    return readers


def events(readers: list[Reader]) -> int:
    return sum(len(r.arrivals) for r in readers)


def test_postgresql_blackholed_while_the_recorder_stops(
    sim: Simulator, recorders: Recorders
) -> None:
    with pg_database() as pg:
        Store.open(pg.url).close()  # migrated directly: the relay is the recorder's way
        parts = make_url(pg.url)
        relay = Relay((parts.host or "127.0.0.1", parts.port or 5432))
        try:
            via = parts.set(host="127.0.0.1", port=relay.port).render_as_string(False)
            proc = recorders.start(via, "--mode", f"reverse:{sim.url}")
            before = run_all(proc, 0, 1)
            time.sleep(0.5)  # committed
            with relay.blackholed():
                during = run_all(proc, 1, 8)
                assert proc.stop(timeout=90) == 0, proc.log.decode()
        finally:
            relay.close()
        stored, exchanges, lost, lost_exchanges = exit_counts(proc)
        with Store.open(pg.url, create=False) as store:
            rows = Queries(store).exchanges()
            kept = sum(len(list(Queries(store).events(x.id))) for x in rows)
        assert (stored, exchanges) == (kept, len(rows))
        assert stored + lost == events([*before, *during])
        assert lost_exchanges == 9 - len(rows) > 0


def test_store_folder_unreadable_for_a_while(sim: Simulator, tmp_path: Path, confdir: Path) -> None:
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv is not installed")
    folder = tmp_path / "store"
    folder.mkdir()
    db = str(folder / "tape.db")
    argv = ["record", "--db", db, "--port", "0", "--confdir", str(confdir)]
    proc = start_ssetape([*argv, "--mode", f"reverse:{sim.url}"], db=db, prefix=NO_OVERRIDE)
    try:
        before = run_all(proc, 0, 2)
        time.sleep(0.5)  # committed
        folder.chmod(0)
        try:
            during = run_all(proc, 2, 2)
            time.sleep(1.0)  # the writer tries again meanwhile
        finally:
            folder.chmod(0o700)
        after = run_all(proc, 4, 2)
        assert proc.stop() == 0, proc.log.decode()
    finally:
        if proc.proc.poll() is None:
            proc.proc.kill()
    stored, exchanges, lost, lost_exchanges = exit_counts(proc)
    log = proc.log.decode()
    assert "cannot tell whether" in log and "was deleted" not in log, log
    readers = [*before, *during, *after]
    with Store.open(db, create=False) as store:
        rows = {x.request_body: x for x in Queries(store).exchanges()}
        for r in readers:  # every exchange stored whole
            assert (
                b"".join(e.raw for e in Queries(store).events(rows[orjson.dumps(r.b)].id)) == r.body
            )
        [run] = Runs(store).all()
    assert (stored, exchanges, lost, lost_exchanges) == (events(readers), 6, 0, 0)
    assert (run.events_recorded, run.events_lost) == (stored, 0)


@pytest.fixture
def immutable_folder(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "store"
    folder.mkdir()
    if shutil.which("chattr") is None:
        pytest.skip("chattr is not installed")
    done = subprocess.run(["chattr", "+i", str(folder)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"chattr +i is not allowed here: {done.stderr.decode().strip()}")
    subprocess.run(["chattr", "-i", str(folder)], check=True)
    try:
        yield folder
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=False)


@pytest.mark.parametrize("mutable_again", [True, False])
def test_store_file_deleted_while_its_folder_is_immutable(
    sim: Simulator, recorders: Recorders, immutable_folder: Path, mutable_again: bool
) -> None:
    db = immutable_folder / "tape.db"
    proc = recorders.start(str(db), "--mode", f"reverse:{sim.url}")
    gone = run_all(proc, 0, 2)
    time.sleep(0.5)  # committed into the file that is about to go
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    subprocess.run(["chattr", "+i", str(immutable_folder)], check=True)
    try:
        during = run_all(proc, 2, 2)
        time.sleep(1.0)  # the writer tries to make a new file meanwhile
        if not mutable_again:
            assert proc.stop(timeout=60) == 0, proc.log.decode()
    finally:
        subprocess.run(["chattr", "-i", str(immutable_folder)], check=True)
    after = run_all(proc, 4, 2) if mutable_again else []
    if mutable_again:
        assert proc.stop() == 0, proc.log.decode()
    stored, exchanges, lost, lost_exchanges = exit_counts(proc)
    assert "was deleted while recording" in proc.log.decode()
    if not mutable_again:  # nothing could be stored: nothing is claimed
        assert not db.exists()
        assert (stored, exchanges) == (0, 0)
        assert (lost, lost_exchanges) == (events([*gone, *during]), 4)
        return
    with Store.open(str(db), create=False) as store:  # a new file, with what came after
        rows = {x.request_body: x for x in Queries(store).exchanges()}
        kept = [*during, *after]
        assert set(rows) == {orjson.dumps(r.b) for r in kept}
        for r in kept:
            assert (
                b"".join(e.raw for e in Queries(store).events(rows[orjson.dumps(r.b)].id)) == r.body
            )
    assert (stored, exchanges) == (events(kept), 4)
    assert (lost, lost_exchanges) == (events(gone), 2)
