"""A store recorded from the simulator (and from one hostile upstream) through `ssetape record`,
shared by the viewer's tests, and the browser they drive.

Browser tests run only when SSETAPE_TEST_BROWSER names a Chromium executable (Debian's
``/usr/bin/chromium``); Playwright drives it through that path and never downloads one.
Screenshots go to SSETAPE_TEST_ARTIFACTS when it is set, else to a temporary folder.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from starlette.testclient import TestClient

from ssetape.simulator.simulator import Simulator
from ssetape.storage.models import Exchange
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from ssetape.web.app import create_app
from tests.conftest import SIM_SPEED, Proc, start_ssetape
from tests.upstreams import fixed_upstream

BROWSER_ENV = "SSETAPE_TEST_BROWSER"
ARTIFACTS_ENV = "SSETAPE_TEST_ARTIFACTS"
# What a hostile stream (or header, or model name) says: as text on the page, it runs nothing.
XSS = '<script>window.pwned=1</script><img src=x onerror="window.pwned=1">'


def _chat_chunk(obj: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def _xss_chunks() -> list[bytes]:
    base = {"id": "c1", "object": "chat.completion.chunk", "model": XSS}
    return [
        _chat_chunk({**base, "choices": [{"index": 0, "delta": {"role": "assistant"}}]}),
        _chat_chunk({**base, "choices": [{"index": 0, "delta": {"content": XSS}}]}),
        # Not JSON: a finding that names this event (seq 2).
        b"data: <b>not json</b>\n\n",
        _chat_chunk({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        b"data: [DONE]\n\n",
    ]


@dataclass
class Tape:
    """The recorded store and what the tests look for in it."""

    db: str
    confdir: Path

    def exchanges(self) -> list[Exchange]:
        store = Store.open(self.db)
        try:
            return Queries(store).exchanges()
        finally:
            store.close()

    def one(self, **where: Any) -> Exchange:
        [x] = [x for x in self.exchanges() if all(getattr(x, k) == v for k, v in where.items())]
        return x


def record(db: str, confdir: Path, upstream: str, posts: list[tuple[str, dict[str, Any]]],
           headers: dict[str, str] | None = None) -> None:  # fmt: skip
    """Each (path, JSON body) through `ssetape record` in front of ``upstream``."""
    proc = start_ssetape(
        ["record", "--mode", f"reverse:{upstream}", "--db", db, "--port", "0",
         "--confdir", str(confdir)],
        # Where it runs: the SQLite file's folder, the CA's for a PostgreSQL URL.
        db=db if "://" not in db else str(confdir / "store"),
    )  # fmt: skip
    try:
        for path, body in posts:
            httpx.post(proc.url + path, json=body, headers=headers, timeout=30).read()
    finally:
        assert proc.stop() == 0, proc.log.decode()


def chat(model: str) -> tuple[str, dict[str, Any]]:
    return "/v1/chat/completions", {
        "model": model,
        "stream": True,
        "messages": [{"role": "user", "content": f"hello {model}"}],
        "stream_options": {"include_usage": True},
    }


@pytest.fixture(scope="session")
def tape(tmp_path_factory: pytest.TempPathFactory) -> Tape:
    folder = tmp_path_factory.mktemp("web")
    db, confdir = str(folder / "tape.db"), folder / "confdir"
    with Simulator(speed=SIM_SPEED).serve_in_thread() as sim:
        record(db, confdir, sim.url, [
            chat("gpt-4o-sim"),
            chat("gpt-4o-sim-pause"),
            chat("gpt-4o-sim-error"),
            ("/v1/messages", {"model": "claude-sim", "max_tokens": 40, "stream": True,
                              "messages": [{"role": "user", "content": "hi"}]}),
            ("/v1/responses", {"model": "o4-mini-sim", "input": "tell me", "stream": True}),
        ])  # fmt: skip
    status = f"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nx-note: {XSS}".encode()
    with fixed_upstream(status, _xss_chunks()) as url:
        record(db, confdir, url, [chat(XSS)], headers={"x-client-note": XSS})
    return Tape(db, confdir)


@pytest.fixture(scope="session")
def web(tape: Tape) -> Iterator[Proc]:
    """`ssetape web` on the recorded store, as a user starts it."""
    proc = start_ssetape(["web", "--db", tape.db, "--port", "0"], db=tape.db)
    yield proc
    assert proc.stop() == 0, proc.log.decode()


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = os.environ.get(ARTIFACTS_ENV)
    if not where:
        return tmp_path_factory.mktemp("web-artifacts")
    path = Path(where)
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def browser() -> Iterator[Any]:
    """A Chromium of the test's own. Not kept across tests: Playwright's sync API keeps an
    event loop running in the thread while it lives, and a test that runs next in the same
    worker (xdist hands out tests one by one) could not call asyncio.run()."""
    executable = os.environ.get(BROWSER_ENV)
    if not executable:
        pytest.skip(f"{BROWSER_ENV} not set: browser tests need a Chromium (/usr/bin/chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        # --no-sandbox: CI runs as root, where Chromium's sandbox cannot start.
        b = pw.chromium.launch(executable_path=executable, headless=True, args=["--no-sandbox"])
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    p = context.new_page()
    p.set_default_timeout(15_000)
    try:
        yield p
    finally:
        context.close()


def app_client(db: str) -> Iterator[TestClient]:
    """The viewer of the store at ``db``, in process, for a test module."""
    store = Store.open(db)
    try:
        with TestClient(create_app(Queries(store))) as c:
            yield c
    finally:
        store.close()


@pytest.fixture(scope="module")
def client(tape: Tape) -> Iterator[TestClient]:
    """The viewer of the shared recorded store."""
    yield from app_client(tape.db)
