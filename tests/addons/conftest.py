"""Fixtures shared by the addon tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.addons.stores import Recorders


@pytest.fixture
def recorders(tmp_path: Path, confdir: Path) -> Iterator[Recorders]:
    """Real `ssetape record` processes; those still running at the end must exit 0."""
    r = Recorders(tmp_path, confdir)
    yield r
    r.stop_all()
