"""`ssetape show --json` of a stream of thousands of tool calls: the first ones and their
count, the same size whatever the stream's length; `--full` lists every call stored."""

from __future__ import annotations

import subprocess
from pathlib import Path

import orjson

from bench.bench_tool_calls import tool_call_stream
from ssetape.analysis.tool_calls import MAX_TOOL_CALLS
from ssetape.storage.store import Store
from ssetape.views.documents import TOOL_CALLS_SHOWN
from tests.conftest import SSETAPE


def _show(db: Path, *args: str) -> bytes:
    r = subprocess.run([SSETAPE, "show", "1", "--db", str(db), "--json", *args],
                       capture_output=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_show_json_lists_the_first_tool_calls_and_counts_them_all(tmp_path: Path) -> None:
    sizes = []
    for calls in (1_500, 3_000):
        db = tmp_path / f"{calls}.db"
        with Store.open(str(db)) as store:
            tool_call_stream(store, calls)
        out = _show(db)
        doc = orjson.loads(out)
        assert doc["tool_calls_total"] == calls
        ids = [c["id"] for c in doc["tool_calls"]]
        assert ids == [f"call_{i}" for i in range(TOOL_CALLS_SHOWN)]
        sizes.append(len(orjson.dumps(doc["tool_calls"])))
        full = orjson.loads(_show(db, "--full"))
        assert len(full["tool_calls"]) == MAX_TOOL_CALLS and full["tool_calls_total"] == calls
    assert sizes[0] == sizes[1] < 64_000
