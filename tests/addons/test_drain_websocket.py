"""A drained stop with a WebSocket session open (issue 39's count, for sessions).

A session is in flight until it closes: the drain waits for it, and one that outlasts the
deadline is interrupted then and counted on the exit line as the row it is. Before, the
drain forgot a session at its 101 (it stopped at once, cutting it), and the deadline's count
was taken from what was in flight rather than from what the recorder ended."""

from __future__ import annotations

import contextlib
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from ssetape.addons.drain import DEADLINE
from ssetape.simulator.simulator import Simulator
from ssetape.simulator.ws_realtime import DELTAS
from tests.addons.stores import Recorders
from tests.addons.test_drain_record import EXIT, exchanges, exited, until
from tests.conftest import Proc

WAIT = 30.0


@pytest.fixture
def realtime() -> Iterator[str]:
    with Simulator().serve_in_thread() as upstream:
        url = upstream.url
        yield url


@contextlib.contextmanager
def session(proc: Proc) -> Iterator[ClientConnection]:
    """A Realtime session through ``proc``, its first frame (session.created) read."""
    url = proc.url.replace("http://", "ws://") + "/v1/realtime?model=ok"
    auth = {"Authorization": "Bearer sk-drain"}
    with connect(url, additional_headers=auth, open_timeout=WAIT) as ws:
        assert orjson.loads(ws.recv(timeout=WAIT))["type"] == "session.created"
        yield ws


def answer(ws: ClientConnection) -> list[str]:
    """One response asked for and read to its end: the event types."""
    ws.send(orjson.dumps({"type": "response.create"}).decode())
    got: list[str] = []
    while not got or got[-1] not in ("response.done", "error"):
        got.append(orjson.loads(ws.recv(timeout=WAIT))["type"])
    return got


def test_a_session_open_at_sigterm_drains_and_ends_completed(
    realtime: str, recorders: Recorders, tmp_path: Path
) -> None:
    db = str(tmp_path / "tape.db")
    proc = recorders.start(db, "--mode", f"reverse:{realtime}")
    with session(proc) as ws:
        proc.proc.send_signal(signal.SIGTERM)
        until(lambda: "draining 1 exchange" in proc.log.decode(), proc.log.decode())
        # The session goes on while the proxy drains: a whole response, then the close.
        got = answer(ws)
    lines = exited(proc)

    assert got.count("response.output_text.delta") == len(DELTAS), got
    m = EXIT.match(lines[-1])
    assert m and re.fullmatch(r"drained 1 exchange in [\d.]+ s", m.group(1)), lines
    assert [(state, error) for state, error, _ in exchanges(db)] == [("completed", None)]


def test_a_session_that_outlasts_the_deadline_is_interrupted_and_counted(
    realtime: str, recorders: Recorders, tmp_path: Path
) -> None:
    db = str(tmp_path / "tape.db")
    proc = recorders.start(db, "--mode", f"reverse:{realtime}", "--drain-timeout", "1")
    with session(proc) as ws:
        proc.proc.send_signal(signal.SIGTERM)
        lines = exited(proc)
        with pytest.raises(ConnectionClosed):  # the stop closed it
            while True:
                ws.recv(timeout=WAIT)

    m = EXIT.match(lines[-1])
    assert m and m.group(1) == (
        "drained 0 exchanges, 1 exchange interrupted at the 1 s deadline"
    ), lines
    [(state, error, events)] = exchanges(db)
    assert (state, error) == ("interrupted", DEADLINE.format(1))
    assert events == 1  # session.created, recorded before the stop
