"""What the read commands import: `ssetape list`, `stats` and `show` start in a fraction of a
second only while they leave the proxy, the migrations, the price data, the timeline drawings
and the servers alone (their start, not their queries, is what a big store's reader waits
for). Checked on module names, never on times: speed is measured in bench/."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench.tapes import build_stream

# What no read command needs, on an SQLite store at the schema's head.
NOT_FOR_READING = [
    "mitmproxy",  # the proxy: most of a second
    "alembic",  # migrations: a store at head opens without them
    "psycopg",  # PostgreSQL's driver, for PostgreSQL URLs only
    "sqlalchemy.dialects.postgresql",  # its dialect, likewise
    "genai_prices",
    "ssetape.cost.price_book",  # prices are read from the store
    "ssetape.analysis.knowledge",  # the analyser: reindex, recording
    "ssetape.views.timeline",  # show --timeline / --svg
    "ssetape.views.timeline_svg",
    "rich.progress",  # reindex, prune
    "ssetape.recording",
    "ssetape.replay",
    "httpx",
    "starlette",  # ssetape web
    "uvicorn",
    "mcp",  # ssetape mcp
    "playwright",
]

# Runs `ssetape ARGS...`, then names the modules loaded of those asked about (on stderr).
CODE = """
import json, sys
asked, args = json.loads(sys.argv[1]), sys.argv[2:]
from ssetape.cli.main import main
try:
    main(args, prog_name="ssetape")
except SystemExit as e:
    assert not e.code, e.code
loaded = sorted({a for a in asked for m in sys.modules if m == a or m.startswith(a + ".")})
print(json.dumps(loaded), file=sys.stderr)
"""


def loaded(args: list[str], asked: list[str]) -> list[str]:
    """Which of ``asked`` (modules or packages) ``ssetape ARGS`` imports."""
    r = subprocess.run(
        [sys.executable, "-c", CODE, json.dumps(asked), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    result: list[str] = json.loads(r.stderr.strip().splitlines()[-1])
    return result


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("start") / "tiny.db")
    build_stream(path, events=3)
    return path


@pytest.mark.parametrize(
    "args",
    [["list"], ["list", "--json"], ["stats"], ["stats", "--json"], ["show", "1"]],
    ids=" ".join,
)
def test_a_read_command_imports_nothing_it_does_not_use(db: str, args: list[str]) -> None:
    assert loaded([*args, "--db", db], NOT_FOR_READING) == []


def test_json_is_written_without_rich(db: str) -> None:
    assert loaded(["list", "--json", "--db", db], ["rich"]) == []
    assert loaded(["show", "1", "--json", "--db", db], ["rich"]) == []


@pytest.mark.parametrize("args", [["--help"], ["list", "--help"], ["show", "--help"]])
def test_help_imports_no_store(args: list[str]) -> None:
    """The group's help reads the table of commands; a command's help, its options."""
    heavy = [*NOT_FOR_READING, "sqlalchemy", "rich", "ssetape.storage"]
    assert loaded(args, heavy) == []
    if args == ["--help"]:
        assert loaded(args, ["ssetape.cli.browse", "ssetape.cli.audit"]) == []


def test_the_terminal_timeline_imports_no_svg(db: str) -> None:
    """`show --timeline` draws in the terminal: the SVG's escaping (xml.sax, which imports
    urllib and http.client) is for `--svg` only."""
    asked = ["ssetape.views.timeline_svg", "xml.sax", "http.client"]
    assert loaded(["show", "1", "--timeline", "--db", db], asked) == []
    assert "ssetape.views.timeline" in loaded(
        ["show", "1", "--timeline", "--db", db], ["ssetape.views.timeline"]
    )
