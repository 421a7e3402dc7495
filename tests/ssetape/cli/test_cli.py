"""The CLI as a user meets it: bad input gets one clear line and a non-zero exit."""

from __future__ import annotations

import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path

import httpx
import orjson

from ssetape.simulator.simulator import Simulator
from tests.conftest import SSETAPE, Proc


def dump(db: Path) -> list[str]:
    with sqlite3.connect(db) as c:
        return list(c.iterdump())


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SSETAPE, *args], capture_output=True, text=True, timeout=60)


def assert_one_line_error(r: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert r.returncode != 0
    assert "Traceback" not in r.stderr + r.stdout
    err = [line for line in r.stderr.splitlines() if line.startswith("Error")]
    assert len(err) == 1, r.stderr
    for n in needles:
        assert n in err[0], err[0]


def test_unknown_option() -> None:
    assert_one_line_error(run("record", "--no-such-option"), "--no-such-option")


def test_bad_mode() -> None:
    assert_one_line_error(run("record", "--mode", "sideways", "--port", "0"), "--mode")


def test_unwritable_db_path(tmp_path: Path) -> None:
    r = run("record", "--db", "/proc/nope/tape.db", "--port", "0")
    assert_one_line_error(r, "/proc/nope/tape.db")


def test_not_a_sqlite_file(tmp_path: Path) -> None:
    f = tmp_path / "notes.txt"
    f.write_text("these are my notes, not a database\n" * 50)
    before = f.read_bytes()
    assert_one_line_error(run("list", "--db", str(f)), "not an SQLite database")
    assert_one_line_error(run("record", "--db", str(f), "--port", "0"), "not an SQLite database")
    assert f.read_bytes() == before


def test_db_from_a_newer_schema(tmp_path: Path, sim: Simulator) -> None:
    db = tmp_path / "tape.db"
    assert run("list", "--db", str(db)).returncode != 0  # missing: nothing to list
    from ssetape.storage.store import Store

    Store.open(str(db)).close()
    with sqlite3.connect(db) as c:
        c.execute("UPDATE alembic_version SET version_num = '9999_future'")
    before = dump(db)
    assert_one_line_error(run("list", "--db", str(db)), "newer")
    assert_one_line_error(run("record", "--db", str(db), "--port", "0"), "newer")
    assert dump(db) == before


def test_missing_db_for_list(tmp_path: Path) -> None:
    assert_one_line_error(run("list", "--db", str(tmp_path / "none.db")), "none.db")


def test_list_and_show_json(sim: Simulator, ssetape_proc: Callable[..., Proc]) -> None:
    proc = ssetape_proc("record", "--mode", f"reverse:{sim.url}")
    body = {"model": "sim-chat", "stream": True, "messages": [{"role": "user", "content": "x"}]}
    httpx.post(proc.url + "/v1/chat/completions?trace=1", json=body, timeout=30)
    httpx.post(proc.url + "/v1/chat/completions", json={**body, "stream": False}, timeout=30)
    assert proc.stop() == 0

    rows = orjson.loads(run("ls", "--db", proc.db, "--json").stdout)
    assert len(rows) == 2
    for row in rows:
        for key in (
            "id",
            "started_at",
            "method",
            "url",
            "status",
            "is_stream",
            "event_count",
            "state",
        ):
            assert key in row
    streamed = next(r for r in rows if r["is_stream"])
    assert streamed["url"].endswith("/v1/chat/completions?trace=1")
    assert (streamed["status"], streamed["state"]) == (200, "completed")
    detail = orjson.loads(run("show", "--db", proc.db, str(streamed["id"]), "--json").stdout)
    assert len(detail["events"]) == streamed["event_count"]
    assert [e["seq"] for e in detail["events"]] == list(range(streamed["event_count"]))
    assert detail["events"][-1]["data"] == "[DONE]"
    human = run("show", "--db", proc.db, str(streamed["id"]))
    assert human.returncode == 0 and "[DONE]" in human.stdout
    assert_one_line_error(run("show", "--db", proc.db, "999"), "no exchange 999")


def test_demo_runs() -> None:
    r = run("demo")
    assert r.returncode == 0, r.stderr
    assert "5 exchanges recorded and replayed" in r.stdout
    assert "completed" in r.stdout and "recorded vs replayed" in r.stdout
    # every stream came back whole: "18/18"-style event counts only
    fidelity = r.stdout.split("recorded vs replayed")[1]
    counts = [w for w in fidelity.split() if w.count("/") == 1 and w.replace("/", "").isdigit()]
    assert len(counts) == 5 and all(a == b for a, b in (c.split("/") for c in counts))


def test_simulate_describes_its_scenarios() -> None:
    r = run("simulate", "--scenarios")
    assert r.returncode == 0
    for keyword in ("error", "cut", "pause", "refusal", "gzip", "chat/completions", "messages"):
        assert keyword in r.stdout


def test_record_and_replay_listen_on_loopback_unless_told(
    sim: Simulator, ssetape_proc: Callable[..., Proc]
) -> None:
    import socket

    for command in ("record", "replay"):
        proc = ssetape_proc(command, "--mode", f"reverse:{sim.url}")
        assert proc.url.startswith("http://127.0.0.1:"), proc.url
        port = int(proc.url.rsplit(":", 1)[1])
        # Bound to loopback only: the machine's other addresses do not answer.
        others = {a for a in [_outbound_address()] if a and not a.startswith("127.")}
        for addr in others:
            with socket.socket() as s:
                s.settimeout(1)
                assert s.connect_ex((addr, port)) != 0, f"{command} answers on {addr}"
        assert proc.stop() == 0


def _outbound_address() -> str | None:
    """This machine's address on its default route (a UDP connect sends nothing)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.123", 9))
        except OSError:
            return None
        return str(s.getsockname()[0])
