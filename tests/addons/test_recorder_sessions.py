"""Sessions through a real `ssetape record`: the x-ssetape-session header names an exchange's
session and never reaches the upstream; --session names the rest; list, show and stats read
them back, and stats' sums per session are the sums of its exchanges."""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import socket
import subprocess
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from mitmproxy import exceptions
from starlette.testclient import TestClient

from ssetape.addons.recorder import Recorder
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from ssetape.web.app import create_app
from tests.conftest import SSETAPE, Proc
from tests.upstreams import read_request, serving

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


@pytest.fixture
def upstream() -> Iterator[tuple[str, list[dict[str, str]]]]:
    """A chat-completions stream whose usage grows with each request (so sums mean
    something), and the header fields of every request it got."""
    seen: list[dict[str, str]] = []
    counter = itertools.count(1)

    def serve(conn: socket.socket) -> None:
        with conn:
            got = read_request(conn, b"")
            if got is None:
                return
            seen.append(got[0])
            n = next(counter)
            usage = {"prompt_tokens": 10 * n, "completion_tokens": n, "total_tokens": 11 * n}
            events = [
                {"id": "c", "model": "m-1", "choices": [{"index": 0, "delta": {"content": "hi"}}]},
                {"id": "c", "model": "m-1", "choices": [], "usage": usage},
            ]
            body = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events)
            conn.sendall(HEAD + _chunk(body + b"data: [DONE]\n\n") + b"0\r\n\r\n")

    with serving(serve) as url:
        yield url, seen


def _post(proxy: str, session: str | None) -> None:
    headers = {"x-ssetape-session": session} if session is not None else {}
    body = {"model": "m-1", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    r = httpx.post(f"{proxy}/v1/chat/completions", json=body, headers=headers, timeout=30)
    assert r.status_code == 200 and b"[DONE]" in r.content


def _json(*args: str) -> Any:
    out = subprocess.run([SSETAPE, *args], capture_output=True, check=True, timeout=60)
    return orjson.loads(out.stdout)


def test_a_session_header_never_reaches_the_upstream_and_names_the_exchange(
    ssetape_proc: Callable[..., Proc], upstream: tuple[str, list[dict[str, str]]], tmp_path: Path
) -> None:
    url, seen = upstream
    proc = ssetape_proc("record", "--mode", f"reverse:{url}", "--session", "run1")
    _post(proc.url, "agent-A")
    _post(proc.url, "agent-A")
    _post(proc.url, None)  # the recorder's session
    _post(proc.url, "x" * 300)  # cut to 200 characters, never refused
    assert proc.stop() == 0, proc.log.decode()

    assert len(seen) == 4
    assert all("x-ssetape-session" not in fields for fields in seen), seen
    db = proc.db
    rows = _json("list", "--db", db, "--json")
    assert sorted(r["session"] for r in rows) == sorted(["agent-A", "agent-A", "run1", "x" * 200])
    for r in rows:  # nor the store's copy of the request
        stored = _json("show", "--db", db, str(r["id"]), "--json")["request"]["headers"]
        assert all(name.lower() != "x-ssetape-session" for name, _ in stored), stored
    only = _json("list", "--db", db, "--json", "--session", "agent-A")
    assert [r["session"] for r in only] == ["agent-A", "agent-A"]

    groups = {g["group"]: g for g in _json("stats", "--db", db, "--by", "session", "--json")}
    assert sorted(groups) == sorted(["agent-A", "run1", "x" * 200])
    for name, g in groups.items():
        mine = [r for r in rows if r["session"] == name]
        assert g["count"] == len(mine)
        assert g["input_tokens"] == sum(r["usage"]["input_tokens"] for r in mine) > 0
        assert g["output_tokens"] == sum(r["usage"]["output_tokens"] for r in mine) > 0
        assert g["ttft_total_ms"] == pytest.approx(sum(r["ttft_ms"] for r in mine), abs=0.01)
        assert g["wall_ms"] >= max(r["duration_ms"] for r in mine)
    shown = subprocess.run(
        [SSETAPE, "show", "--db", db, str(only[0]["id"])], capture_output=True, text=True
    )
    assert "session: agent-A" in shown.stdout
    table = subprocess.run(
        [SSETAPE, "stats", "--db", db, "--by", "session"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert "agent-A" in table.stdout and "wall s" in table.stdout

    # The viewer: ?session= narrows its list, and its stats group by session too.
    with Store.open(db, create=False) as store, TestClient(create_app(Queries(store))) as web:
        page = web.get("/", params={"session": "agent-A"}).text
        assert re.findall(r'<tr data-id="(\d+)"', page) == [str(r["id"]) for r in only]
        assert "run1" in web.get("/stats", params={"by": "session"}).text


@pytest.mark.parametrize("bad", ["a\x01b", "y" * 201])
def test_a_bad_session_option_is_a_one_line_error(tmp_path: Path, bad: str) -> None:
    out = subprocess.run(
        [SSETAPE, "record", "--db", str(tmp_path / "t.db"), "--session", bad],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "--session" in out.stderr and "Traceback" not in out.stderr


def test_the_session_option_changed_at_runtime_names_the_exchanges_after_it(
    tmp_path: Path,
) -> None:
    """In process (real addon, real recording process, real SQLite): mitmweb's options
    editor or ``--set`` at runtime; a bad name is an option error and the old one stays."""
    with warnings.catch_warnings():  # mitmproxy's test helpers import ldap3 and passlib
        warnings.simplefilter("ignore", DeprecationWarning)
        from mitmproxy.test import taddons, tflow, tutils

    async def run() -> None:
        rec = Recorder()
        with taddons.context(rec) as tctx:
            tctx.configure(rec, ssetape_db=str(tmp_path / "tape.db"), ssetape_session="s1")
            for name in ("s2", None):
                flow = tflow.tflow()
                rec.requestheaders(flow)
                await rec.request(flow)
                flow.response = tutils.tresp()
                rec.response(flow)
                if name is not None:
                    tctx.configure(rec, ssetape_session=name)
            with pytest.raises(exceptions.OptionsError, match=r"ssetape_session: .* print"):
                tctx.configure(rec, ssetape_session="bad\nname")
            assert tctx.options.ssetape_session == "s2"
            rec.done()

    asyncio.run(run())
    with Store.open(str(tmp_path / "tape.db"), create=False) as store:
        assert sorted(x.session or "" for x in Queries(store).exchanges()) == ["s1", "s2"]
