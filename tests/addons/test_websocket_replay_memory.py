"""Replay of a long WebSocket session holds a page of it, not the session (issue 42): `ssetape
replay` plays 128 MiB of server frames to a real client byte for byte and on time while its
own peak memory stays a small part of that above an idle replay server's (it held the whole
session, about three times its payloads, before)."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from websockets.sync.client import connect

from ssetape.storage.store import Store
from tests.conftest import Proc
from tests.ssetape.replay.ws_tapes import ASK, REALTIME, UPSTREAM, Frame, record

FRAMES = 1024
FRAME_BYTES = 128 << 10
SESSION = FRAMES * FRAME_BYTES  # 128 MiB of server frames
ASKED_MS = 20
STEP_MS = 2  # between server frames, as recorded
GROWTH = 48 << 20  # what the session may add to the replay process, at most (under 2/5)


def status(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} for {pid}")


def payload(n: int) -> bytes:
    """Server frame ``n``: binary audio-like bytes, each frame its own (a page mixed up or
    sent twice would show)."""
    block = hashlib.sha256(n.to_bytes(4, "big")).digest()
    return block * (FRAME_BYTES // len(block))


@pytest.mark.slow
@pytest.mark.parametrize("away", [0.0, 4.0], ids=["reading", "not-reading-for-4s"])
def test_a_long_session_is_replayed_whole_while_the_process_holds_a_page_of_it(
    ssetape_proc: Callable[..., Proc], tmp_path: Path, away: float
) -> None:
    """``away``: the client reads nothing for that long after its frame (the recording
    plays in ~2 s): what it has not read must not pile up in the replay process either."""
    db = str(tmp_path / "tape.db")
    frames: list[Frame] = [(5, "server", '{"type":"session.created"}'), (ASKED_MS, "client", ASK)]
    frames += [(ASKED_MS + 1 + n * STEP_MS, "server", payload(n)) for n in range(FRAMES)]
    with Store.open(db) as store:
        record(store, "a" * 32, frames)
    del frames
    # The same server with a tiny session: what the replay process holds without one.
    idle_db = str(tmp_path / "idle.db")
    with Store.open(idle_db) as store:
        record(store, "b" * 32, [(5, "server", '{"type":"session.created"}')])
    idle = ssetape_proc("replay", "--mode", f"reverse:{UPSTREAM}", db=idle_db)
    baseline = status(idle.proc.pid, "VmHWM")
    proc = ssetape_proc("replay", "--mode", f"reverse:{UPSTREAM}", db=db)
    pid = proc.proc.pid
    with connect(proc.url.replace("http", "ws", 1) + REALTIME + "?model=m", max_size=None) as ws:
        assert ws.recv(timeout=10) == '{"type":"session.created"}'
        asked = time.monotonic()
        ws.send(ASK)
        time.sleep(away)  # the client's reader stops at its queue: the socket fills up
        late = 0.0
        for n in range(FRAMES):
            got = ws.recv(timeout=10)
            at = time.monotonic() - asked
            assert got == payload(n), n  # byte for byte, in order, binary as recorded
            due = (1 + n * STEP_MS) / 1000
            assert at >= due - 0.005, (n, at, due)  # never early
            late = max(late, at - due)
    grown = status(pid, "VmHWM") - baseline  # its peak, loading and playing the session
    mib = 1 << 20
    print(f"replay process: {baseline / mib:.0f} MiB idle, peak +{grown / mib:.1f} MiB for a "
          f"{SESSION // mib} MiB session; latest frame {late * 1000:.0f} ms late")  # fmt: skip
    assert grown < GROWTH, f"the replay grew by {grown >> 20} MiB for a {SESSION >> 20} MiB session"
    if not away:
        assert late < 0.5  # a loaded 2-core machine; test_ws_replay checks timing closely
