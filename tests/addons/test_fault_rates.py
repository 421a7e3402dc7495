"""The recorder's own faults are not the provider's (issue 40).

A real `ssetape record` records, from an upstream whose model returns no error at all: two
plain streams; one the client's request made fail (a 400); one the recording process fell
behind on (frozen while 7 MB went by: the proxy relayed it whole, the recording lost its
end); one whose recording process was killed mid-stream (the proxy starts another, which
ends the orphan); one the recorder was stopped in the middle of. Another model answers a
500. The first model's error rate is then 0 in `ssetape stats --by model`, on the viewer's
stats page and in MCP's stats tool, alike; each shows ssetape's own failures when asked.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import time
from collections.abc import Iterator
from html import unescape
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner
from sqlalchemy import update
from starlette.testclient import TestClient

from ssetape.addons.recorder import STOPPED
from ssetape.cli.main import main
from ssetape.recording.worker import FELL_BEHIND
from ssetape.storage.models import Exchange
from ssetape.storage.queries import Queries
from ssetape.storage.runs import INTERRUPTED
from ssetape.storage.store import Store
from ssetape.vocabulary import fault_choices
from ssetape.web.app import create_app
from tests.addons.stores import Recorders, recording_process, store_target, wait_for
from tests.addons.test_recorder_crash import Reader
from tests.ssetape.mcp_server.client import call, in_memory
from tests.upstreams import serving

FINE, BROKEN = "gpt-fine", "gpt-broken"
BIG_CHUNK, BIG_CHUNKS = 60_000, 120  # 7 MB: more than the pipe and the proxy's buffer hold
SLOW_CHUNKS, SLOW_EVERY = 150, 0.04  # 6 s: long enough to be broken off in the middle


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with store_target(request.param, tmp_path) as target:
        yield target


def _event(model: str, delta: dict[str, Any], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    chunk = {"id": "c1", "object": "chat.completion.chunk", "model": model, "choices": [choice]}
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def _requests(conn: socket.socket) -> Iterator[dict[str, Any]]:
    """The JSON bodies of the requests on one connection."""
    buffered = b""
    while True:
        while b"\r\n\r\n" not in buffered:
            got = conn.recv(65536)
            if not got:
                return
            buffered += got
        head, _, buffered = buffered.partition(b"\r\n\r\n")
        found = re.search(rb"(?i)content-length:\s*(\d+)", head)
        length = int(found.group(1)) if found else 0
        while len(buffered) < length:
            got = conn.recv(65536)
            if not got:
                return
            buffered += got
        body, buffered = buffered[:length], buffered[length:]
        yield orjson.loads(body)


def _answer(conn: socket.socket, req: dict[str, Any]) -> None:
    """What the prompt asks for: ``fine``, ``big``, ``slow`` streams, or an HTTP error."""
    model, prompt = req["model"], req["messages"][-1]["content"]
    if prompt in ("400", "500"):
        reason = b"Bad Request" if prompt == "400" else b"Internal Server Error"
        body = orjson.dumps({"error": {"message": "no", "type": f"error_{prompt}"}})
        head = b"HTTP/1.1 %s %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
        conn.sendall(head % (prompt.encode(), reason, len(body)) + body)
        return
    conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                 b"transfer-encoding: chunked\r\n\r\n")  # fmt: skip
    sizes = {"fine": (3, 5, 0.0), "big": (BIG_CHUNKS, BIG_CHUNK, 0.0)}
    count, size, every = sizes.get(prompt, (SLOW_CHUNKS, 20, SLOW_EVERY))
    events = [_event(model, {"role": "assistant"})]
    events += [_event(model, {"content": "x" * size}) for _ in range(count)]
    events += [_event(model, {}, "stop"), b"data: [DONE]\n\n"]
    for data in events:
        conn.sendall(b"%x\r\n%s\r\n" % (len(data), data))
        time.sleep(every)
    conn.sendall(b"0\r\n\r\n")


def _serve(conn: socket.socket) -> None:
    with conn:
        try:
            for req in _requests(conn):
                _answer(conn, req)
        except OSError:
            return  # the proxy went away (stopped mid-stream)


def _body(model: str, prompt: str) -> dict[str, Any]:
    return {"model": model, "stream": True, "messages": [{"role": "user", "content": prompt}]}


def _record(recorders: Recorders, db: str, upstream: str) -> None:
    """Everything the module's text says, through one `ssetape record`."""
    # Rows kept while the store is slow, and so the chunks the proxy holds for a recording
    # process that does not take them: 2 MB (the 7 MB stream overflows it).
    # --drain-timeout 0: a stop interrupts the streams in flight (it would let them end).
    proc = recorders.start(
        db, "--mode", f"reverse:{upstream}", "--drain-timeout", "0",
        "--set", "ssetape_max_pending=2000",
    )  # fmt: skip
    url = proc.url + "/v1/chat/completions"
    for model, prompt in ((FINE, "fine"), (FINE, "fine"), (FINE, "400"), (BROKEN, "500")):
        Reader(url, _body(model, prompt)).run()

    # The recording process falls behind: frozen while the proxy relays a 7 MB stream.
    worker = recording_process(proc)
    os.kill(worker, signal.SIGSTOP)
    try:
        big = Reader(url, _body(FINE, "big"))
        big.run()
    finally:
        os.kill(worker, signal.SIGCONT)
    assert len(big.arrivals) == BIG_CHUNKS + 3  # the client got every event

    # The recording process is killed mid-stream; the proxy starts another.
    killed = Reader(url, _body(FINE, "slow"))
    killed.start()
    wait_for(lambda: len(killed.arrivals) >= 20)
    os.kill(worker, signal.SIGKILL)
    killed.join(30)
    wait_for(lambda: _worker(proc) not in (None, worker), timeout=30)

    # The recorder is stopped mid-stream.
    stopped = Reader(url, _body(FINE, "slow"))
    stopped.start()
    wait_for(lambda: len(stopped.arrivals) >= 20)
    assert proc.stop() == 0, proc.log.decode()
    stopped.join(30)


def _worker(proc: Any) -> int | None:
    """The recording process now: None between one's death and the next's start."""
    try:
        return recording_process(proc)
    except AssertionError:
        return None


def _cli_stats(db: str, fault: str | None) -> dict[str, tuple[int, int, float]]:
    args = ["stats", "--db", db, "--by", "model", "--json"] + (["--fault", fault] if fault else [])
    done = CliRunner().invoke(main, args)
    assert done.exit_code == 0, done.output
    return {
        g["group"]: (g["count"], g["failed"], g["failed_rate"]) for g in orjson.loads(done.output)
    }


def _web_stats(web: TestClient, fault: str | None) -> dict[str, tuple[int, int, float]]:
    params = {"by": "model", **({"fault": fault} if fault else {})}
    page = web.get("/stats", params=params).text
    shown = {}
    for group, row in re.findall(r'<tr data-group="([^"]*)">(.*?)</tr>', page):
        cells = [unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<td>(.*?)</td>", row)]
        rate = float(cells[3].removesuffix(" %")) / 100
        shown[unescape(group)] = (int(cells[1].replace(",", "")), int(cells[2]), round(rate, 3))
    return shown


def test_error_rates_by_model_count_only_provider_faults_everywhere(
    recorders: Recorders, db: str
) -> None:
    with serving(_serve) as upstream:
        _record(recorders, db, upstream)
    faults: list[str | None] = [None, *fault_choices()]
    cli = {f: _cli_stats(db, f) for f in faults}

    store = Store.open(db, create=False)
    try:
        rows = Queries(store).exchanges(limit=100)
        [behind] = [x for x in rows if FELL_BEHIND in (x.error or "")]
        [gone] = [x for x in rows if x.error == INTERRUPTED]
        [stop] = [x for x in rows if x.error == STOPPED]
        with TestClient(create_app(Queries(store))) as web:
            pages = {f: _web_stats(web, f) for f in faults}
            shown = web.get(f"/exchanges/{stop.id}").text

        async def body(client: Any) -> dict[str | None, Any]:
            return {
                f: await call(client, "stats", group_by="model", **({"fault": f} if f else {}))
                for f in faults
            }

        mcp = {
            f: {g["group"]: (g["count"], g["failed"], g["failed_rate"]) for g in got["groups"]}
            for f, got in in_memory(store, body).items()
        }
    finally:
        store.close()

    # The stream the recording process fell behind on: relayed whole, its end not recorded.
    assert behind.state == "completed" and behind.gap_seq is not None
    assert (behind.outcome, behind.fault, behind.model) == ("completed", None, FINE)
    # The killed recording process's exchange (never analysed: no model) and the stopped one.
    assert (gone.state, gone.fault, gone.model) == ("interrupted", "ssetape", None)
    assert (stop.outcome, stop.fault, stop.model) == ("interrupted", "ssetape", FINE)
    assert "<dt>fault</dt><dd>ssetape</dd>" in shown

    # By default, the provider's failures only: the fine model never failed.
    provider = {FINE: (5, 0, 0.0), BROKEN: (1, 1, 1.0), "-": (1, 0, 0.0)}
    assert cli[None] == cli["provider"] == provider
    assert cli["ssetape"] == {FINE: (5, 1, 0.2), BROKEN: (1, 0, 0.0), "-": (1, 1, 1.0)}
    assert cli["client"] == {FINE: (5, 1, 0.2), BROKEN: (1, 0, 0.0), "-": (1, 0, 0.0)}
    assert cli["network"] == {FINE: (5, 0, 0.0), BROKEN: (1, 0, 0.0), "-": (1, 0, 0.0)}
    assert cli["any"] == {FINE: (5, 2, 0.4), BROKEN: (1, 1, 1.0), "-": (1, 1, 1.0)}
    # Identically on the viewer's stats page and in MCP's stats tool.
    assert pages == mcp == cli

    # What stats counts is what the list lists, fault by fault.
    for fault in fault_choices():
        args = ["list", "--db", db, "--outcome", "failed", "--fault", fault, "--json"]
        done = CliRunner().invoke(main, args)
        assert done.exit_code == 0, done.output
        assert len(orjson.loads(done.output)) == sum(n for _, n, _ in cli[fault].values())
    ssetape = CliRunner().invoke(main, ["list", "--db", db, "--fault", "ssetape", "--json"])
    assert {r["id"] for r in orjson.loads(ssetape.output)} == {gone.id, stop.id}
    table = CliRunner().invoke(main, ["stats", "--db", db, "--by", "model"])
    assert re.search(r"\bssetape\b", table.output), table.output  # a column of its own
    assert "1 client" in table.output, table.output  # the note of what is not counted
    bad = CliRunner().invoke(main, ["stats", "--db", db, "--fault", "recorder"])
    assert bad.exit_code == 2 and "'recorder' is not one of" in bad.output

    # The same store as an older ssetape left it: no faults, the stream it fell behind on
    # stored as cut. Its failures count as the provider's (the 400 too) but the interrupted
    # ones, until `ssetape reindex --stale` reads them again (the analysis version says which).
    with Store.open(db, create=False) as store, store.Session.begin() as s:
        s.execute(update(Exchange).values(fault=None, analysis_version=5))
        s.execute(update(Exchange).where(Exchange.id == behind.id).values(outcome="cut"))
    old = _cli_stats(db, None)
    assert old[FINE] == (5, 2, 0.4) and old["-"] == (1, 0, 0.0)
    assert _cli_stats(db, "ssetape") == cli["ssetape"]
    done = CliRunner().invoke(main, ["reindex", "--db", db, "--stale"])
    assert done.exit_code == 0 and "reindexed 7 exchange(s)" in done.output, done.output
    # The killed process's exchange is analysed now: its model is the request's.
    assert _cli_stats(db, None) == {FINE: (6, 0, 0.0), BROKEN: (1, 1, 1.0)}
    assert _cli_stats(db, "ssetape") == {FINE: (6, 2, 0.3333), BROKEN: (1, 0, 0.0)}
