"""No key of a WebSocket session reaches the store, `show` or an exported cassette: not the
browser's subprotocol token (`openai-insecure-api-key.<key>`), not Gemini's header, not
`?key=` in the upgrade URL."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest
from websockets.sync.client import connect

from ssetape.simulator.simulator import Simulator
from tests.conftest import SSETAPE, Proc

BROWSER_KEY = "sk-proj-SECRETbrowserKEY0123456789"
GOOGLE_KEY = "AIzaSECRETgoogleKEY0123456789"
QUERY_KEY = "AIzaSECRETqueryKEY0123456789"


@pytest.fixture
def realtime() -> Iterator[tuple[Simulator, str]]:
    with Simulator(keep_sessions=True).serve_in_thread() as upstream:
        url = upstream.url
        yield upstream, url


def test_websocket_keys_never_stored(
    realtime: tuple[Simulator, str], ssetape_proc: Callable[..., Proc], tmp_path: Path
) -> None:
    upstream, url = realtime
    proc = ssetape_proc("record", "--mode", f"reverse:{url}")
    ws_url = proc.url.replace("http://", "ws://") + f"/v1/realtime?model=ok&key={QUERY_KEY}"
    offered = ["realtime", f"openai-insecure-api-key.{BROWSER_KEY}", "openai-beta.realtime-v1"]
    with connect(
        ws_url,
        subprotocols=offered,
        additional_headers={"x-goog-api-key": GOOGLE_KEY},  # type: ignore[arg-type]
    ) as ws:
        assert ws.subprotocol == "realtime"
        assert b"session.created" in ws.recv(timeout=10).encode()
    # The upstream got the key as sent: only what is stored is masked.
    sent = upstream.sessions[0].headers["Sec-WebSocket-Protocol"]
    assert BROWSER_KEY in sent
    assert proc.stop() == 0

    cassette = tmp_path / "out.jsonl"
    export = [SSETAPE, "export", "--db", proc.db, "-o", str(cassette)]
    subprocess.run(export, check=True, capture_output=True)
    shown = [
        subprocess.run([SSETAPE, "show", "--db", proc.db, "1", *fmt], capture_output=True)
        for fmt in ([], ["--json"])
    ]
    everything = [Path(proc.db).read_bytes(), proc.log, cassette.read_bytes()]
    everything += [s.stdout + s.stderr for s in shown]
    for secret in (BROWSER_KEY, GOOGLE_KEY, QUERY_KEY):
        for blob in everything:
            assert secret.encode() not in blob
    detail = orjson.loads(shown[1].stdout)
    headers = {k.lower(): v for k, v in detail["request"]["headers"]}
    # The other tokens stay as sent: which subprotocols were offered is worth seeing.
    before, token, after = headers["sec-websocket-protocol"].split(", ")
    assert (before, after) == ("realtime", "openai-beta.realtime-v1")
    assert token.startswith("openai-insecure-api-key.<redacted:")
    assert headers["x-goog-api-key"].startswith("<redacted:")
