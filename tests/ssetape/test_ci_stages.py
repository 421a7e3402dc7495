"""The heavy files CI runs in its last stage only (tests/conftest.py) are files that exist: a
file renamed away from the list would silently run in every stage again, and one named
wrongly would never be skipped."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import ONCE_FILES

TESTS = Path(__file__).parents[1]


def test_every_file_run_once_exists() -> None:
    assert sorted(f for f in ONCE_FILES if not (TESTS / f).is_file()) == []
