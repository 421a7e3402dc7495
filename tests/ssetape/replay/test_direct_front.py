"""`ssetape replay` with nothing to forward runs the direct server, without mitmproxy."""

from __future__ import annotations

import re
import resource
import subprocess
from pathlib import Path

import pytest

from ssetape.storage.store import Store
from tests.conftest import LISTEN, SSETAPE


def test_the_direct_replay_server_raises_its_descriptor_limit(tmp_path: Path) -> None:
    """As the proxy does: a burst of replayed streams must not meet the 1,024 default."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= 1024:
        pytest.skip(f"the hard descriptor limit here is {hard}: nothing to raise to")
    db = tmp_path / "tape.db"
    Store.open(str(db)).close()
    proc = subprocess.Popen(
        [SSETAPE, "replay", "--db", str(db), "--port", "0", "--mode", "reverse:https://x.test"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard)),
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if LISTEN.search(line):
                break
        limits = Path(f"/proc/{proc.pid}/limits").read_text()
        soft = re.search(r"Max open files\s+(\d+)", limits)
        assert soft is not None and int(soft.group(1)) > 1024, limits
    finally:
        proc.terminate()
        proc.wait(20)
