"""Readers on a real PostgreSQL hot standby (issue 26): a primary and its streaming standby,
made for this module in a temporary directory (initdb, pg_basebackup -R) on free ports and
removed at the end. Recorded into the primary, `ssetape list/show/stats --read-db` read it on
the standby, say how far behind it is, mark what is still recording there "as of the standby",
never write to it, and refuse a standby whose schema is behind this ssetape's.

Runs where the suite runs its PostgreSQL tests (SSETAPE_TEST_PG_URL set: the server's binaries
are here) and with SSETAPE_TEST_REPLICA set (CI sets it on one Python: it starts two servers);
skips in one line otherwise.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from alembic import command
from click.testing import CliRunner
from sqlalchemy import create_engine, text

from ssetape.cli.main import main
from ssetape.storage.queries import Queries
from ssetape.storage.standby import is_standby, standby_state
from ssetape.storage.store import Store, StoreError, alembic_config
from tests.storage.test_prune import Feed, chat_rows

PG_ENV = "SSETAPE_TEST_PG_URL"
REPLICA_ENV = "SSETAPE_TEST_REPLICA"
pytestmark = pytest.mark.timeout(180)


def _bindir() -> Path | None:
    """The newest PostgreSQL server binaries installed (Debian's layout)."""
    found = [
        p
        for p in Path("/usr/lib/postgresql").glob("*/bin")
        if all((p / tool).is_file() for tool in ("initdb", "pg_ctl", "pg_basebackup"))
    ]
    found.sort(key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)
    return found[-1] if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Pair:
    primary: str  # SQLAlchemy URLs
    standby: str
    standby_log: Path

    def sql(self, url: str, query: str) -> object:
        engine = create_engine(url, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as conn:
                return conn.execute(text(query)).scalar()
        finally:
            engine.dispose()

    def replayed(self, timeout: float = 30) -> None:
        """Wait until the standby has replayed all the primary has written so far."""
        target = self.sql(self.primary, "SELECT pg_current_wal_lsn()::text")
        deadline = time.monotonic() + timeout
        query = f"SELECT pg_last_wal_replay_lsn() >= '{target}'::pg_lsn"
        while not self.sql(self.standby, query):
            assert time.monotonic() < deadline, f"the standby did not replay {target} in time"
            time.sleep(0.05)


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    """A primary and its streaming hot standby, as the PostgreSQL server's own user."""
    if not os.environ.get(PG_ENV):
        pytest.skip(f"{PG_ENV} not set: PostgreSQL tests need a server")
    if not os.environ.get(REPLICA_ENV):
        pytest.skip(f"{REPLICA_ENV} not set: the standby test starts two servers (CI sets it "
                    "in one stage)")  # fmt: skip
    bindir = _bindir()
    if bindir is None:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl, pg_basebackup) to start one")
    as_user: list[str] = []
    owner: pwd.struct_passwd | None = None
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root: run it as its own user
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and there is no postgres user to run a server as")
        if shutil.which("runuser") is None:
            pytest.skip("running as root without runuser to start a server as postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    root = Path(tempfile.mkdtemp(prefix="ssetape-standby-"))
    if owner is not None:
        os.chown(root, owner.pw_uid, owner.pw_gid)

    def run(*args: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*as_user, *map(str, args)], capture_output=True, text=True, check=check, timeout=120
        )

    def tool(name: str) -> Path:
        return bindir / name

    def append(path: Path, lines: str) -> None:  # to a file the server's user owns
        subprocess.run([*as_user, "sh", "-c", 'cat >> "$0"', str(path)], input=lines,
                       text=True, check=True)  # fmt: skip

    primary_dir, standby_dir = root / "primary", root / "standby"
    p_port, s_port = _free_port(), _free_port()
    started: list[Path] = []

    def start(data: Path, log: Path) -> None:
        if run(tool("pg_ctl"), "-D", data, "-l", log, "-w", "start", check=False).returncode:
            tail = log.read_text(errors="replace").strip().splitlines()[-3:] if log.exists() else []
            pytest.fail(f"cannot start the server in {data.name}: {' / '.join(tail)}")
        started.append(data)

    try:
        made = run(tool("initdb"), "-D", primary_dir, "-U", "postgres", "--auth=trust",
                   "-E", "UTF8", "--no-sync", check=False)  # fmt: skip
        if made.returncode:
            pytest.skip(f"initdb failed: {(made.stderr.strip().splitlines() or ['?'])[-1]}")
        conf = (
            f"\nlisten_addresses = '127.0.0.1'\nport = {p_port}\n"
            f"unix_socket_directories = '{root}'\nwal_level = replica\nmax_wal_senders = 4\n"
            "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n"
        )
        append(primary_dir / "postgresql.conf", conf)
        start(primary_dir, root / "primary.log")
        copied = run(tool("pg_basebackup"), "-h", "127.0.0.1", "-p", str(p_port), "-U",
                     "postgres", "-D", standby_dir, "-R", "-X", "stream", "-c", "fast",
                     "--no-sync", check=False)  # fmt: skip
        if copied.returncode:
            lines = copied.stderr.strip().splitlines() or ["?"]
            pytest.skip(f"the primary refused replication (pg_basebackup): {lines[-1]}")
        append(standby_dir / "postgresql.conf", f"\nport = {s_port}\nhot_standby = on\n")
        log = root / "standby.log"
        start(standby_dir, log)
        base = "postgresql+psycopg://postgres@127.0.0.1:{}/postgres"
        yield Pair(base.format(p_port), base.format(s_port), log)
    finally:
        for data in reversed(started):
            run(tool("pg_ctl"), "-D", data, "-m", "immediate", "-w", "stop", check=False)
        shutil.rmtree(root, ignore_errors=True)


def cli(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args), catch_exceptions=False, color=False,
                           terminal_width=160)  # fmt: skip
    return r.exit_code, r.stdout, r.stderr


@contextlib.contextmanager
def feeding(url: str) -> Iterator[Feed]:
    store = Store.open(url)
    feed = Feed(store)
    try:
        yield feed
    finally:
        feed.close()
        store.close()


LAG = re.compile(r"read from a standby, (\d+\.\d) s behind the primary")


def test_readers_read_the_standby_and_say_how_far_behind_it_is(pair: Pair, tmp_path: Path) -> None:
    unused = tmp_path / "primary.db"  # --db is where writes would go: readers leave it alone
    with feeding(pair.primary) as feed:
        now = dt.datetime.now(dt.UTC)
        done = feed.exchange(now - dt.timedelta(seconds=2), 3, prompt="finished")
        flying = feed.begin(now, "still streaming")
        feed.events(flying, chat_rows(2, done=False))
        # One left recording by a recorder that is gone: a primary marks it interrupted,
        # a reader of the standby must not even try.
        feed.recorder = f"{socket.gethostname()}:4194000:1"
        orphan = feed.begin(now - dt.timedelta(seconds=1), "orphan")
        feed.settle()
        pair.replayed()

        code, out, err = cli("list", "--db", str(unused), "--read-db", pair.standby, "--json")
        assert code == 0, err
        rows = {x["uid"]: x for x in orjson.loads(out)}
        assert isinstance(orjson.loads(out), list)
        assert rows[done]["state"] == "completed"
        assert rows[flying]["state"] == rows[orphan]["state"] == "recording"
        assert err.startswith("read from a standby"), err
        ids = {rows[flying]["id"], rows[orphan]["id"]}
        assert all(f"#{i}" in err for i in ids) and "recording (as of the standby)" in err
        assert not unused.exists(), "a reader created the --db it does not use"

        # Replay held: the primary finishes the stream, the standby still shows it recording,
        # and says by how much it is behind.
        pair.sql(pair.standby, "SELECT pg_wal_replay_pause()")
        try:
            time.sleep(1.2)
            feed.events(flying, chat_rows(2, done=True)[2:])
            feed.writer.finish(flying, state="completed", ttfb_us=1_000, duration_us=9_000)
            feed.settle()
            time.sleep(0.3)  # the primary's WAL reaches the standby (received, not replayed)
            code, out, err = cli("list", "--read-db", pair.standby, "--db", str(unused))
            assert code == 0, err
            footer = out.strip().splitlines()[-1]
            m = LAG.search(footer)
            assert m and float(m.group(1)) >= 1.0, footer
            assert f"#{rows[flying]['id']}" in footer and "(as of the standby)" in footer
            code, out, err = cli("show", "--read-db", pair.standby, flying, "--json")
            assert code == 0 and orjson.loads(out)["state"] == "recording"
            assert LAG.search(err) and "recording (as of the standby)" in err, err
            with Store.open_read_only(pair.standby) as standby:
                state = standby_state(standby.engine)
            assert state is not None and not state.caught_up and state.replay_lag
        finally:
            pair.sql(pair.standby, "SELECT pg_wal_replay_resume()")
        pair.replayed()
        code, out, err = cli("show", "--read-db", pair.standby, flying, "--json")
        assert code == 0 and orjson.loads(out)["state"] == "completed", err
        assert "caught up" in err and "as of the standby" not in err, err

        code, out, err = cli("stats", "--read-db", pair.standby, "--json")
        assert code == 0 and isinstance(orjson.loads(out), list), err
        assert err.startswith("read from a standby"), err
        # An audit export reads the standby too: the exchange whole, the primary untouched.
        tape = tmp_path / "audit.jsonl"
        code, out, err = cli("export", "--read-db", pair.standby, "--db", str(unused),
                             "--id", done, "-o", str(tape))  # fmt: skip
        assert code == 0, err
        with Store.open(str(tmp_path / "copy.db")) as copy:
            code, out, err = cli("import", str(tape), "--db", str(tmp_path / "copy.db"))
            assert code == 0, err
            (got,) = Queries(copy).exchanges()
            assert got.request_body is not None and b"finished" in got.request_body
            assert len(list(Queries(copy).events(got.id))) == feed.sent[done]
        assert not unused.exists()
        # --db naming the standby itself: it is read, nothing is marked there.
        code, out, err = cli("list", "--db", pair.standby, "--json")
        assert code == 0, err
        orphaned = {x["uid"]: x for x in orjson.loads(out)}[orphan]
        assert orphaned["state"] == "recording"
        assert "read-only transaction" not in pair.standby_log.read_text(errors="replace")
        # The primary's own reader marks the orphan; the standby follows.
        code, out, err = cli("list", "--db", pair.primary, "--json")
        assert {x["uid"]: x for x in orjson.loads(out)}[orphan]["state"] == "interrupted"
        assert err == "", "a primary is no standby"


def test_what_the_standby_says_of_itself(pair: Pair) -> None:
    with contextlib.closing(Store.open(pair.primary)) as primary:
        assert not is_standby(primary.engine) and standby_state(primary.engine) is None
    pair.replayed()
    with contextlib.closing(Store.open_read_only(pair.standby)) as standby:
        assert is_standby(standby.engine)
        state = standby_state(standby.engine)
        assert state is not None and state.last_replay is not None
        assert state.replay_lag is not None and state.replay_lag >= 0
        assert state.to_json()["standby"] is True and state.describe().startswith("read from")


def test_a_standby_behind_this_ssetape_is_one_line(pair: Pair) -> None:
    """A primary migrated by an older ssetape: the standby is refused, never migrated."""
    schema = "ssetape_behind"
    admin = create_engine(pair.primary, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
        old = create_engine(f"{pair.primary}?options=-csearch_path%3D{schema}")
        with old.begin() as conn:
            config = alembic_config()
            config.attributes["connection"] = conn
            command.upgrade(config, "0001")
        old.dispose()
        pair.replayed()
        standby = f"{pair.standby}?options=-csearch_path%3D{schema}"
        with pytest.raises(StoreError, match="migrate the primary"):
            Store.open_read_only(standby)
        code, out, err = cli("list", "--read-db", standby)
        assert code == 1 and out == ""
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "behind this ssetape's" in lines[0], err
        assert "let the standby catch up" in lines[0]
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        admin.dispose()


def test_the_viewer_and_agents_say_they_read_a_standby(pair: Pair) -> None:
    """`ssetape web --read-db` and `ssetape mcp --read-db`: the list page says how current it
    is, and so does the stats tool; read from the primary, neither says anything."""
    from mcp import ClientSession
    from starlette.testclient import TestClient

    from ssetape.web.app import create_app
    from tests.ssetape.mcp_server.test_server import call, in_memory

    async def stats(client: ClientSession) -> dict[str, object]:
        return await call(client, "stats")

    pair.replayed()
    with contextlib.closing(Store.open_read_only(pair.standby)) as standby:
        with TestClient(create_app(Queries(standby))) as client:
            page = client.get("/").text
        assert 'class="standby"' in page and "read from a standby" in page
        said = in_memory(standby, stats)["standby"]
        assert isinstance(said, dict) and said["standby"] is True
    with contextlib.closing(Store.open(pair.primary)) as primary:
        with TestClient(create_app(Queries(primary))) as client:
            assert 'class="standby"' not in client.get("/").text
        assert in_memory(primary, stats)["standby"] is None
