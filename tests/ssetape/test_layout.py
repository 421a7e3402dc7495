"""The layout a newcomer relies on: few top-level modules, small modules, imports that go one
way, mitmproxy only where a proxy runs, and each closed vocabulary spelled out once."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ssetape.vocabulary import ExchangeState, Header, Outcome, RecordMode

ROOT = Path(__file__).resolve().parents[2]
# Where each package of the installed layout lives in the repository.
TREES = {
    "ssetape": ROOT / "src/ssetape",
    "ssetape.addons": ROOT / "addons",
    "ssetape.storage": ROOT / "storage",
    "ssetape.migrations": ROOT / "migrations",
}
MAX_TOP_LEVEL = 12
MAX_LINES = 450
# Concerns from the bottom up: a module may import its own layer and those below it.
LAYERS = [
    {
        "records",
        "vocabulary",
        "matching",
        "redactor",
        "files",
        "recorder_id",
        "http_fields",
        "framing",
    },
    {"storage", "migrations"},
    {"cost"},
    {"analysis"},
    {"recording", "replay", "cassettes", "simulator", "telemetry"},
    {"addons", "testing", "views", "web", "mcp_server"},
    {"cli"},
]


def modules() -> Iterator[tuple[str, Path]]:
    for package, tree in TREES.items():
        for path in sorted(tree.rglob("*.py")):
            if "__pycache__" in path.parts or "versions" in path.parts:
                continue
            parts = path.relative_to(tree).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            yield ".".join((package, *parts)), path


def imports_of(path: Path) -> set[str]:
    """Every ssetape module imported anywhere in the file (functions and TYPE_CHECKING too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("ssetape")}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ssetape"):
            assert node.module is not None
            if node.module != "ssetape":  # `from ssetape import sse` imports ssetape.framing.sse
                found.add(node.module)
            # `from ssetape.x import y` may name a module y.
            found |= {f"{node.module}.{a.name}" for a in node.names}
    return found


def graph() -> dict[str, set[str]]:
    names = dict(modules())
    return {name: {m for m in imports_of(path) if m in names and m != name}
            for name, path in names.items()}  # fmt: skip


def concern(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "ssetape"


def test_few_modules_at_the_top_and_none_too_long() -> None:
    top = [p.name for p in (ROOT / "src/ssetape").glob("*.py")]
    assert len(top) <= MAX_TOP_LEVEL, sorted(top)
    long = {
        name: n for name, path in modules() if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not long


def cycles_in(edges: dict[str, set[str]]) -> list[list[str]]:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    found: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                found.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    return found


def test_no_import_cycles() -> None:
    assert not cycles_in(graph())


def concern_graph() -> dict[str, set[str]]:
    """Which concern (a subpackage, or a module at the top) imports which, from the code."""
    edges: dict[str, set[str]] = {}
    for module, imported in graph().items():
        if module == "ssetape":
            continue  # the public surface names things from every layer, lazily
        edges.setdefault(concern(module), set()).update(
            concern(o) for o in imported if concern(o) != concern(module)
        )
    return edges


def test_concerns_import_each_other_one_way() -> None:
    """No two concerns import each other, even within one layer of LAYERS (as analysis and
    cost once did, each through a different module): a layer's order is the graph's."""
    edges = concern_graph()
    assert not cycles_in(edges)
    # Every concern the code has is placed in LAYERS.
    placed = set().union(*LAYERS) | {"ssetape"}
    assert set(edges) | set().union(*edges.values()) <= placed


def test_imports_go_one_way() -> None:
    rank = {name: i for i, layer in enumerate(LAYERS) for name in layer}
    upward = []
    for module, imported in graph().items():
        if module == "ssetape":
            continue  # the public surface names things from every layer, lazily
        for other in imported:
            if rank[concern(other)] > rank[concern(module)]:
                upward.append(f"{module} -> {other}")
    assert not upward
    # Capture turns chunks into rows; which tables they land in is the store's business.
    assert not {m for m in graph()["ssetape.recording.capture"] if m.startswith("ssetape.storage")}


def test_the_mitmproxy_free_paths_import_no_mitmproxy() -> None:
    """Replay, cassettes, the read-only commands and the recording process start without it."""
    code = """
import sys
import ssetape.cassettes.cassette, ssetape.cassettes.har, ssetape.replay.direct_front
import ssetape.replay.timed_server, ssetape.recording.worker, ssetape.testing.tape_session
import ssetape.cli.browse, ssetape.cli.audit, ssetape.cli.cassettes, ssetape.cli.main
import ssetape.web.server, ssetape.mcp_server.server
from ssetape.cli.main import main
for command in ("list", "show", "stats", "reindex", "export", "import", "web", "mcp"):
    main.get_command(None, command)
print(sorted({m.split(".")[0] for m in sys.modules if m.startswith("mitmproxy")}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _vocabulary_literals(path: Path) -> list[str]:
    """String constants of a closed vocabulary compared with, or keyed on, where the
    vocabulary's own module should be used instead."""
    values = {m.value for m in (*ExchangeState, *Outcome, *RecordMode)}
    # Words only a record mode uses; "none" and "all" are everyday words, caught in compares.
    modes = {RecordMode.NEW_EPISODES.value}
    words = ("state", "outcome", "mode", "record_mode")
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and (node.value.startswith("x-ssetape-") or node.value in modes)
        ):
            found.append(f"{path.name}:{node.lineno}: {node.value!r}")
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            named = any(
                isinstance(s, ast.Attribute | ast.Name)
                and (s.attr if isinstance(s, ast.Attribute) else s.id).endswith(words)
                for s in sides
            )
            for s in sides:
                if named and isinstance(s, ast.Constant) and s.value in values:
                    found.append(f"{path.name}:{node.lineno}: compares with {s.value!r}")
    return found


@pytest.mark.parametrize("vocabulary", [RecordMode, ExchangeState, Outcome, Header])
def test_each_vocabulary_is_spelled_out_once(vocabulary: type) -> None:
    assert vocabulary.__module__ == "ssetape.vocabulary"
    strays = [
        hit
        for name, path in modules()
        if name not in ("ssetape.vocabulary", "ssetape.simulator.scenario")
        and not name.startswith(("ssetape.migrations", "ssetape.simulator"))
        for hit in _vocabulary_literals(path)
    ]
    assert not strays


def test_no_sql_outside_storage() -> None:
    """Every reader and writer goes through the typed queries of storage/: no module outside
    storage/ and migrations/ builds a statement or names a table. What is left to others is
    SQLAlchemy's exceptions (to tell a store's failure from a bug) and URL parsing."""
    allowed = {"sqlalchemy.exc", "sqlalchemy.make_url"}
    found = []
    for name, path in modules():
        if name.startswith(("ssetape.storage", "ssetape.migrations")):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sqlalchemy"):
                used = {node.module} if node.module != "sqlalchemy" else set()
                used |= {f"sqlalchemy.{a.name}" for a in node.names if node.module == "sqlalchemy"}
                found += [f"{name}: {u}" for u in sorted(used - allowed)]
            elif isinstance(node, ast.Import):
                found += [
                    f"{name}: {a.name}" for a in node.names if a.name.startswith("sqlalchemy")
                ]
    assert not found
