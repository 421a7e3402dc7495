"""A WebSocket session the server ends with a normal close (1000), recorded through `ssetape
record` and replayed offline by `ssetape replay`, the official openai SDK's Realtime client
both times: the store tells the server's close from a client's, the replay closes as the
server did (its code and reason, at its recorded offset) instead of waiting for the client,
and nothing shows or counts the session as failed."""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from collections.abc import Callable, Iterator

import openai
import orjson
from starlette.testclient import TestClient
from websockets.exceptions import ConnectionClosedOK
from websockets.sync.server import ServerConnection, serve

from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from ssetape.web.app import create_app
from tests.conftest import SSETAPE, Proc
from tests.ssetape.mcp_server.client import call, in_memory

KEY = "sk-proj-SECRETrealtimeKEY0123456789"
MARGIN = 0.1  # seconds late, at most: a loaded 2-core machine
BYE = 1000, "session over"
LINGER = 0.3  # seconds the upstream waits after its answer before it closes


def _realtime(ws: ServerConnection) -> None:
    """One Realtime answer, then the server ends the session itself, as planned (an idle
    or maximum-duration limit does)."""
    ws.send(orjson.dumps({"type": "session.created", "session": {"model": "m"}}).decode())
    ws.recv()  # response.create
    for event in (
        {"type": "response.created", "response": {"id": "resp_1"}},
        {"type": "response.output_text.delta", "delta": "Hello"},
        {"type": "response.done", "response": {"id": "resp_1", "status": "completed"}},
    ):
        ws.send(orjson.dumps(event).decode())
        time.sleep(0.05)
    time.sleep(LINGER)
    ws.close(*BYE)


@contextlib.contextmanager
def upstream() -> Iterator[str]:
    with serve(_realtime, "127.0.0.1", 0) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            yield f"http://127.0.0.1:{server.socket.getsockname()[1]}"
        finally:
            server.shutdown()


def session(base: str) -> tuple[float, int, str]:
    """Seconds from the SDK's response.create to the server's close, and its code and
    reason (the client never closes)."""
    client = openai.OpenAI(base_url=base + "/v1", api_key=KEY, max_retries=0)
    with client.realtime.connect(model="m") as conn:
        conn.recv_bytes()
        asked = time.monotonic()
        conn.response.create()
        try:
            while True:
                conn.recv_bytes()
        except ConnectionClosedOK as e:
            assert e.rcvd is not None, "the server's close frame came"
            return time.monotonic() - asked, e.rcvd.code, e.rcvd.reason
    raise AssertionError("unreachable")


def test_a_servers_normal_close_is_recorded_as_its_own_and_replayed_where_it_came(
    ssetape_proc: Callable[..., Proc],
) -> None:
    with upstream() as url:
        rec = ssetape_proc("record", "--mode", f"reverse:{url}")
        at_then, *said_then = session(rec.url)
        assert rec.stop() == 0, rec.log.decode()
    assert tuple(said_then) == BYE and at_then >= LINGER
    with Store.open(rec.db, create=False) as store:
        q = Queries(store)
        (x,) = q.exchanges()
        asked = next(e.offset_us for e in q.events(x.id) if e.direction == "client")
        recorded = ((x.duration_us or 0) - asked) / 1e6
    # The upstream is gone: the close comes from the tape, where the server's came.
    proc = ssetape_proc("replay", "--mode", f"reverse:{url}", db=rec.db)
    at, *said = session(proc.url)
    assert tuple(said) == BYE
    assert recorded - 0.005 <= at <= recorded + MARGIN, (at, recorded)
    assert proc.stop() == 0
    # No reader calls the session failed: its outcome, its fault, its error, the counts.
    shown = orjson.loads(_ssetape("show", str(x.id), "--json", "--db", rec.db))
    assert (shown["outcome"], shown["fault"], shown["error"]) == ("completed", None, None)
    text = _ssetape("show", str(x.id), "--db", rec.db)
    assert "error:" not in text and "closed by the server: 1000 session over" in text, text
    (stats,) = orjson.loads(_ssetape("stats", "--json", "--db", rec.db))
    assert stats["failed"] == 0, stats
    with Store.open(rec.db, create=False) as store:
        mcp = in_memory(store, lambda client: call(client, "get_exchange", id=x.id))
        with TestClient(create_app(Queries(store))) as web:
            page = web.get(f"/exchanges/{x.id}").text
    assert (mcp["exchange"]["outcome"], mcp["exchange"]["error"]) == ("completed", None)
    assert "1000 session over" not in page and "<dt>outcome</dt><dd>completed</dd>" in page


def _ssetape(*args: str) -> str:
    done = subprocess.run([SSETAPE, *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout
