"""The public surface: what ``import ssetape`` offers, its version, and what the wheel ships."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import ssetape

ROOT = Path(__file__).resolve().parents[2]
PUBLIC = [
    "Analysis",
    "Analyzer",
    "Cassette",
    "CassetteError",
    "ExchangeState",
    "Finding",
    "ImportReport",
    "Outcome",
    "RecordMode",
    "Simulator",
    "SseEvent",
    "SseParser",
    "Store",
    "StoreError",
    "__version__",
]


def test_all_is_pinned_and_every_name_resolves() -> None:
    assert sorted(ssetape.__all__) == PUBLIC
    for name in ssetape.__all__:
        assert getattr(ssetape, name) is not None
    assert dir(ssetape) == PUBLIC
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        ssetape.nope  # type: ignore[attr-defined]  # noqa: B018


def test_names_are_the_defining_modules_objects() -> None:
    from ssetape.framing.sse import SseParser
    from ssetape.vocabulary import RecordMode

    assert ssetape.SseParser is SseParser and ssetape.RecordMode is RecordMode


def test_importing_ssetape_loads_nothing_heavy() -> None:
    """Every pytest run in an environment with ssetape imports it (for the plugin)."""
    code = (
        "import sys, ssetape; heavy = [m for m in ('sqlalchemy', 'mitmproxy', 'rich', "
        "'ssetape.storage') if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_version_is_the_installed_distributions() -> None:
    assert ssetape.__version__ == importlib.metadata.version("ssetape")


def test_the_wheel_ships_every_package_and_the_type_marker(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("ssetape-*.whl")
    assert wheel.name.startswith(f"ssetape-{ssetape.__version__}-")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "ssetape/py.typed" in names
    # Every module of the source tree is in the wheel (a package missing from pyproject's
    # list would only show in a real install, never in the editable one tests run from).
    trees = {
        "ssetape": ROOT / "src/ssetape",
        "ssetape/addons": ROOT / "addons",
        "ssetape/storage": ROOT / "storage",
        "ssetape/migrations": ROOT / "migrations",
    }
    for prefix, tree in trees.items():
        for source in tree.rglob("*.py"):
            if "__pycache__" not in source.parts:
                assert f"{prefix}/{source.relative_to(tree).as_posix()}" in names, source
