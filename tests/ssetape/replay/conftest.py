"""Fixtures of the replay tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ssetape.storage.store import Store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """An empty SQLite store of the test's own."""
    s = Store.open(str(tmp_path / "tape.db"))
    yield s
    s.close()
