"""Real WebSocket sessions recorded through `ssetape record` (reverse mode) for the tests of
what `show`, the viewer and MCP show of them: the official openai SDK's Realtime client, and
raw websockets clients for Gemini Live, Responses WebSocket mode lanes (``stream_id``) and a
hostile client, against the simulator as the recording tests run it."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import openai
import orjson
import pytest
from websockets.sync.client import connect

from ssetape.simulator.simulator import Simulator
from ssetape.simulator.ws_wire import Session
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from tests.addons.test_websocket_knowledge import GEMINI_PATH, gemini
from tests.addons.test_websocket_record import KEY, one_response
from tests.conftest import start_ssetape
from tests.ssetape.web.conftest import XSS

THINK = 1.5  # seconds the user of the two-turn session thinks between its turns
TWO_TURNS = "gpt-realtime-two"
LANES = ("lane-a", "lane-b")
RESPONSES_MODEL = "gpt-5-mini"


@dataclass
class Recorded:
    """The store, each session's exchange id by name, and what the fake sent and got."""

    db: str
    ids: dict[str, int]
    sent: dict[str, Session]  # the fake's record of each session, by name


def two_turns(url: str) -> None:
    """The openai SDK's Realtime client: two responses, the user thinking between them."""
    client = openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0)
    with client.realtime.connect(model=TWO_TURNS) as conn:
        assert conn.recv().type == "session.created"
        for turn in range(2):
            if turn:
                time.sleep(THINK)
            conn.response.create()
            for event in conn:
                if event.type == "response.done":
                    break


def lanes(url: str) -> None:
    """Responses WebSocket mode with two lanes asked at once: their frames interleave."""
    with connect(url.replace("http://", "ws://") + "/v1/responses") as ws:
        for lane in LANES:
            ask = {"type": "response.create", "model": RESPONSES_MODEL, "input": lane,
                   "store": False, "stream_id": lane}  # fmt: skip
            ws.send(orjson.dumps(ask).decode())
        done = 0
        while done < len(LANES):
            if orjson.loads(ws.recv(timeout=10))["type"] == "response.completed":
                done += 1


def hostile(url: str) -> None:
    """A client whose frame kind and model are markup: shown, they must run nothing."""
    path = f"/v1/realtime?model={quote(XSS, safe='')}"
    with connect(url.replace("http://", "ws://") + path) as ws:
        ws.recv(timeout=10)  # session.created
        ws.send(orjson.dumps({"type": XSS, "note": XSS}).decode())
        ws.send(orjson.dumps({"type": "response.create"}).decode())
        while orjson.loads(ws.recv(timeout=10))["type"] != "response.done":
            pass


def record_sessions(folder: Path, db: str | None = None) -> Recorded:
    """Each session through one `ssetape record`, one after the other, into ``db`` (a
    PostgreSQL URL, or by default an SQLite file in ``folder``)."""
    db, confdir = db or str(folder / "tape.db"), folder / "confdir"
    confdir.mkdir(parents=True, exist_ok=True)
    upstream = Simulator(keep_sessions=True)
    names: list[str] = []
    with upstream.serve_in_thread():
        url = upstream.url
        proc = start_ssetape(["record", "--mode", f"reverse:{url}", "--db", db, "--port", "0",
                              "--confdir", str(confdir)],
                             db=db if "://" not in db else str(confdir / "store"))  # fmt: skip
        try:
            for name, run in (
                ("two", lambda: two_turns(proc.url)),
                ("error", lambda: one_response("error", proc)),
                ("gemini", lambda: gemini(proc, "gemini-live-2.5-flash")),
                ("lanes", lambda: lanes(proc.url)),
                ("hostile", lambda: hostile(proc.url)),
            ):
                run()
                names.append(name)
                # The next session's exchange comes after this one's, in id order.
                time.sleep(0.1)
        finally:
            assert proc.stop() == 0, proc.log.decode()
    store = Store.open(db, create=False)
    try:
        xs = sorted(Queries(store).exchanges(limit=100), key=lambda x: x.id)
    finally:
        store.close()
    assert [x.transport for x in xs] == ["websocket"] * len(names)
    assert xs[2].path == GEMINI_PATH and xs[3].path == "/v1/responses"
    return Recorded(db, {n: x.id for n, x in zip(names, xs, strict=True)},
                    dict(zip(names, upstream.sessions, strict=True)))  # fmt: skip


_RECORDED: dict[str, Recorded] = {}


def recorded(factory: pytest.TempPathFactory) -> Recorded:
    """The sessions, recorded once per test process (each reader only reads the store)."""
    key = str(factory.getbasetemp())
    if key not in _RECORDED:
        _RECORDED[key] = record_sessions(factory.mktemp("ws-sessions"))
    return _RECORDED[key]


def within_ms(ms: float | None, seconds: float) -> bool:
    """About ``seconds`` (the fake's delay), with wide margins for a busy machine."""
    return ms is not None and seconds * 500 < ms < seconds * 1000 + 500
