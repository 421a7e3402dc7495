"""Record mode new_episodes with WebSocket sessions: a session the tape does not hold is
relayed to the recording proxy and recorded (the official openai SDK as the client, a live
answer byte for byte); the next one opened the same way is replayed by the replay server,
with the recording proxy stopped meanwhile. Reverse mode, and forward mode through the CA."""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from ssetape.simulator.simulator import Simulator
from ssetape.simulator.ws_realtime import DELTAS
from ssetape.vocabulary import ExchangeState
from tests.addons.test_replay_new_episodes import exchanges, frozen, recording_proxy
from tests.addons.test_websocket_replay import assert_on_time, realtime, recorded
from tests.conftest import Proc, self_signed


@contextmanager
def replaying(
    how: str, start: Callable[..., Proc], tmp_path: Path, confdir: Path, upstream: Simulator
) -> Iterator[tuple[Proc, str, dict[str, Any]]]:
    """A new_episodes replay in front of the upstream: (proc, base URL, websocket options)."""
    if how == "reverse":
        with upstream.serve_in_thread():
            url = upstream.url
            yield (
                start("replay", "--record-mode", "new_episodes", "--mode", f"reverse:{url}"),
                url,
                {},
            )
        return
    cert, key = self_signed(tmp_path)
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert, key)
    trust = ssl.create_default_context(cafile=confdir / "mitmproxy-ca-cert.pem")
    upstream.ssl = server_tls
    with upstream.serve_in_thread():
        url = upstream.url
        proc = start("replay", "--record-mode", "new_episodes",
                     "--set", f"ssl_verify_upstream_trusted_ca={cert}")  # fmt: skip
        yield proc, url.replace("127.0.0.1", "localhost"), {"proxy": proc.url, "ssl": trust}


@pytest.mark.parametrize("how", ["reverse", "forward-https"])
def test_a_session_that_misses_is_recorded_then_replayed_by_the_replay_server(
    ssetape_proc: Callable[..., Proc], tmp_path: Path, confdir: Path, how: str
) -> None:
    upstream = Simulator(keep_sessions=True)
    with replaying(how, ssetape_proc, tmp_path, confdir, upstream) as (proc, base, wss):
        base = proc.url if how == "reverse" else base
        first_live, heard_live, end = realtime(base, "ok", wss=wss)
        assert end is None and len(upstream.sessions) == 1  # it reached the upstream
        assert sum(b'"response.output_text.delta"' in d for _, d in heard_live) == len(DELTAS)
        # Stored as it was heard, once the session ended.
        ((then, _),) = _stored(proc.db)
        assert [d for _, d in heard_live] == [d for _, d in then]
        # The same session again: the replay server plays it, mitmproxy (stopped) cannot.
        with frozen(recording_proxy(proc.proc.pid)):
            first, heard, end = realtime(base, "ok", wss=wss)
        assert len(upstream.sessions) == 1
        assert first == first_live and end is None
        assert_on_time(heard, then)
        assert proc.stop() == 0
    assert len(exchanges(proc.db)) == 1
    assert b"replayed 1, missed 0, recorded 1" in proc.log, proc.log.decode()


def _stored(db: str) -> list[tuple[list[tuple[float, bytes]], float]]:
    """The recorded sessions, once the recorder has stored the one that just ended whole."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if [x.state for x in exchanges(db)] == [ExchangeState.COMPLETED]:
            break
        time.sleep(0.05)
    return recorded(db)
