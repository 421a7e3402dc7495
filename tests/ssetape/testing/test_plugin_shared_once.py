"""Record mode ``once`` and a cassette many tests share: the run that makes it records every
test's requests into it; a later run replays it and records nothing."""

from __future__ import annotations

from pathlib import Path

# Imported here, before pytester snapshots sys.modules: in-process runs drop what they import,
# and C extensions (SQLAlchemy's) do not survive being imported twice.
import httpx  # noqa: F401
import mitmproxy.certs  # noqa: F401
import pytest

import ssetape.testing.tape_session  # noqa: F401
from ssetape.simulator.simulator import Simulator
from tests.conftest import SIM_SPEED

pytest_plugins = ["pytester"]

SHARED = """
import httpx, pytest

pytestmark = pytest.mark.ssetape("shared.jsonl")

@pytest.mark.parametrize("n", range({tests}))
def test_one(ssetape, n):
    body = {{"model": "sim-chat", "messages": [{{"role": "user", "content": str(n)}}]}}
    r = httpx.post(ssetape.base_url("{upstream}") + "/v1/chat/completions", json=body,
                   timeout=30)
    assert r.status_code == 200
"""


def _exchanges(cassette: Path) -> int:
    return sum('"kind":"exchange"' in line for line in cassette.read_text().splitlines())


@pytest.mark.parametrize("workers", [None, "3"], ids=["serial", "xdist-3"])
def test_once_records_every_test_sharing_a_new_cassette(
    pytester: pytest.Pytester, confdir: Path, workers: str | None
) -> None:
    args = ["--ssetape-confdir", str(confdir), "-p", "no:cacheprovider", "-p", "no:randomly"]
    args += ["-n", workers] if workers else []
    cassette = pytester.path / "shared.jsonl"
    with Simulator(speed=SIM_SPEED).serve_in_thread() as sim:
        upstream = sim.url
        pytester.makepyfile(test_shared=SHARED.format(tests=16, upstream=upstream))
        pytester.runpytest("--ssetape-record-mode=once", *args).assert_outcomes(passed=16)
        assert _exchanges(cassette) == 16
        written = cassette.read_bytes()

        # It existed when this run began: `once` replays it, records nothing, and a request
        # it lacks is a miss, though the upstream is there.
        pytester.makepyfile(test_shared=SHARED.format(tests=17, upstream=upstream))
        result = pytester.runpytest("--ssetape-record-mode=once", *args)
        result.assert_outcomes(passed=16, failed=1)
    assert "1 request(s) not in cassette" in result.stdout.str()
    assert cassette.read_bytes() == written

    # The upstream is gone: all 16 replay.
    pytester.makepyfile(test_shared=SHARED.format(tests=16, upstream=upstream))
    pytester.runpytest(*args).assert_outcomes(passed=16)
