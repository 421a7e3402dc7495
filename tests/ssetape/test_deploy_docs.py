"""docs/DEPLOYMENT.md quotes each file of docs/deploy/ whole, as the suite runs it (issue 40):
an operator who copies the block from the page gets the tested file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).parents[2] / "docs"
FILES = sorted(p.name for p in (DOCS / "deploy").iterdir() if p.is_file())


def blocks() -> list[str]:
    text = (DOCS / "DEPLOYMENT.md").read_text()
    return [m.group(1) for m in re.finditer(r"^```[a-z]*\n(.*?)^```$", text, re.S | re.M)]


def test_there_are_recipes() -> None:
    assert {"haproxy.cfg", "pgbouncer.ini", "standby-check.sql"} <= set(FILES)


@pytest.mark.parametrize("name", FILES)
def test_deployment_quotes_the_tested_file_whole(name: str) -> None:
    assert (DOCS / "deploy" / name).read_text() in blocks()
    assert f"docs/deploy/{name}" in (DOCS / "DEPLOYMENT.md").read_text()
