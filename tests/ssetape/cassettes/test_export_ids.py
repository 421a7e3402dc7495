"""`ssetape export` writes each exchange's store id, so that a line leads back to `ssetape show
ID`; an import ignores it (the importing store numbers its own rows, and the exchange is the
same row whichever store exported it), and a test's cassette has none."""

from __future__ import annotations

import subprocess
from pathlib import Path

import orjson
import pytest

from ssetape.cassettes.cassette import Cassette
from ssetape.simulator.simulator import Simulator
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from tests.conftest import SIM_SPEED, SSETAPE
from tests.ssetape.web.conftest import chat, record


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("ids")
    (folder / "confdir").mkdir()
    path = folder / "tape.db"
    with Simulator(speed=SIM_SPEED).serve_in_thread() as sim:
        record(str(path), folder / "confdir", sim.url,
               [chat("gpt-4o-sim"), chat("gpt-4o-sim-error"), chat("gpt-4o-sim")])  # fmt: skip
    return path


def ssetape(*args: str) -> subprocess.CompletedProcess[bytes]:
    r = subprocess.run([SSETAPE, *args], capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r


def exchanges(tape: Path) -> list[dict[str, object]]:
    lines = [orjson.loads(line) for line in tape.read_bytes().splitlines()[1:]]
    return [x for x in lines if x["kind"] == "exchange"]


def ids_by_request(tape: Path) -> dict[object, list[object]]:
    by: dict[object, list[object]] = {}
    for x in exchanges(tape):
        by.setdefault(x["fingerprint"], []).append(x["id"])
    return by


def uids(path: Path) -> list[str]:
    with Store.open(str(path), create=False) as store:
        return sorted(x.uid for x in Queries(store).exchanges())


def test_an_exported_line_leads_back_to_show(db: Path, tmp_path: Path) -> None:
    tape = tmp_path / "tape.jsonl"
    ssetape("export", "--db", str(db), "-o", str(tape))
    lines = exchanges(tape)
    assert sorted(x["id"] for x in lines) == [1, 2, 3]  # type: ignore[type-var]
    assert all(list(x)[:2] == ["kind", "id"] for x in lines)  # the id beside the kind
    for x in lines:
        shown = orjson.loads(ssetape("show", str(x["id"]), "--db", str(db), "--json").stdout)
        assert shown["fingerprint"] == x["fingerprint"] and shown["status"] == x["status"]
    # Standard output too.
    out = ssetape("export", "--db", str(db), "-o", "-").stdout
    assert out.count(b'{"kind":"exchange","id":') == 3


def test_an_import_ignores_the_ids(db: Path, tmp_path: Path) -> None:
    tape, plain, one = tmp_path / "tape.jsonl", tmp_path / "plain.jsonl", tmp_path / "one.jsonl"
    ssetape("export", "--db", str(db), "-o", str(tape))
    ssetape("export", "--db", str(db), "-o", str(one), "--id", "2")
    with Store.open(str(db), create=False) as store:
        Cassette(plain).export(store)  # as a test's cassette is written: no ids
    assert all("id" not in x for x in exchanges(plain))
    # Into a store that numbers them its own way (exchange 2 first): nothing collides, and
    # the id is not an unknown field.
    other = tmp_path / "other.db"
    ssetape("import", str(one), "--db", str(other))
    r = ssetape("import", str(tape), "--db", str(other))
    assert b"warning" not in r.stderr
    assert b"imported 2 exchange(s)" in r.stdout and b"1 already there" in r.stdout
    # The same exchanges with or without their ids: the same uids, imported once.
    assert b"imported 0 exchange(s)" in ssetape("import", str(plain), "--db", str(other)).stdout
    fresh = tmp_path / "fresh.db"
    ssetape("import", str(plain), "--db", str(fresh))
    assert uids(fresh) == uids(other)
    # Exported from there, with other ids: the same uids again.
    again = tmp_path / "again.jsonl"
    ssetape("export", "--db", str(other), "-o", str(again))
    assert sorted(x["id"] for x in exchanges(again)) == [1, 2, 3]  # type: ignore[type-var]
    assert ids_by_request(again) != ids_by_request(tape)
    back = tmp_path / "back.db"
    ssetape("import", str(again), "--db", str(back))
    assert uids(back) == uids(fresh)
