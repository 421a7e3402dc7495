"""The pytest plugin names each test's recorded exchanges after the test (its node id), and
the session changes nothing on replay. The tests of a process share one recording proxy, and
each cassette holds its own test's exchanges, no more and no fewer."""

from __future__ import annotations

import http.server
import threading
from pathlib import Path

import httpx  # noqa: F401

# Imported here, before pytester snapshots sys.modules (see test_pytest_plugin).
import mitmproxy.certs  # noqa: F401
import pytest

import ssetape.testing.tape_session  # noqa: F401
from ssetape.analysis.stats import Stats
from ssetape.cassettes.cassette import Cassette
from ssetape.simulator.simulator import Simulator
from ssetape.storage.filters import ExchangeFilter
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from ssetape.testing import tape_recording
from tests.conftest import SIM_SPEED

pytest_plugins = ["pytester"]

TESTS = """
import httpx, pytest

UPSTREAM = "{upstream}"
CHAT = dict(model="sim-chat", stream=True, messages=[dict(role="user", content="hi")])


def ask(ssetape):
    base = ssetape.base_url(UPSTREAM + "/v1")
    with open("proxies.txt", "a") as f:  # which proxy each test recorded through
        f.write(base + "\\n")
    r = httpx.post(base + "/chat/completions", json=CHAT, timeout=30)
    assert r.status_code == 200 and "[DONE]" in r.text


def test_one(ssetape):
    ask(ssetape)


@pytest.mark.parametrize("n", [7])
def test_two(ssetape, n):
    ask(ssetape)
    ask(ssetape)
"""


def test_each_test_records_into_a_session_of_its_own_and_replays_unchanged(
    pytester: pytest.Pytester, confdir: Path, tmp_path: Path
) -> None:
    args = ["--ssetape-confdir", str(confdir), "-p", "no:cacheprovider", "-p", "no:randomly"]
    with Simulator(speed=SIM_SPEED).serve_in_thread() as sim:
        pytester.makepyfile(test_llm=TESTS.format(upstream=sim.url))
        run = pytester.inline_run("--ssetape-record-mode=once", *args)
        run.assertoutcome(passed=2)
    ids = sorted(r.nodeid for r in run.getreports("pytest_runtest_logreport") if r.when == "call")
    assert [i.rpartition("/")[2] for i in ids] == [
        "test_llm.py::test_one",
        "test_llm.py::test_two[7]",
    ]

    cassettes = sorted((pytester.path / "cassettes" / "test_llm").iterdir())
    assert [p.name for p in cassettes] == ["test_one.jsonl", "test_two[7].jsonl"]
    with Store.open(str(tmp_path / "all.db")) as store:
        for path in cassettes:
            Cassette(path).import_into(store)
        groups = Stats(store).groups("session", ExchangeFilter())
        one = [x.session for x in Queries(store).exchanges()]
    assert sorted(g["group"] for g in groups) == sorted(set(one)) == ids
    by_session = {g["group"]: g for g in groups}
    assert [by_session[i]["count"] for i in ids] == [1, 2]
    assert all(g["output_tokens"] > 0 for g in groups)
    # One recording proxy served both tests.
    used = (pytester.path / "proxies.txt").read_text().split()
    assert len(used) == 3 and len(set(used)) == 1

    # The simulator is gone: the session is no part of matching, every request is found.
    pytester.runpytest(*args).assert_outcomes(passed=2)


LEFT_OPEN = """
import httpx

UPSTREAM = "{upstream}"
OPEN = []


def test_left_open(ssetape):
    base = ssetape.base_url(UPSTREAM + "/v1")
    client = httpx.Client(timeout=30)
    request = client.build_request("POST", base + "/chat/completions", json={{"stream": True}})
    response = client.send(request, stream=True)
    chunks = response.iter_raw()  # (a generator dropped would close the response)
    assert next(chunks).startswith(b"data: ")
    OPEN.append((client, response, chunks))  # the test ends with its stream still coming
"""


class _Endless(http.server.BaseHTTPRequestHandler):
    """An upstream whose stream sends one event, then nothing until the test lets it go."""

    release = threading.Event()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        self.wfile.write(b'data: {"choices":[]}\n\n')
        self.wfile.flush()
        self.release.wait(60)

    def log_message(self, *args: object) -> None:
        pass


def test_a_stream_left_open_fails_its_test_and_writes_no_cassette(
    pytester: pytest.Pytester, confdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Written at the end of the test, its cassette would silently miss the stream: the test
    fails instead, saying why, once the shared proxy has waited its while."""
    monkeypatch.setattr(tape_recording, "SETTLE_WAIT", 2.0)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Endless)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    args = ["--ssetape-confdir", str(confdir), "-p", "no:cacheprovider", "-p", "no:randomly"]
    try:
        upstream = f"http://127.0.0.1:{server.server_address[1]}"
        pytester.makepyfile(test_open=LEFT_OPEN.format(upstream=upstream))
        run = pytester.inline_run("--ssetape-record-mode=once", *args)
    finally:
        _Endless.release.set()
        server.shutdown()
    failed = [r for r in run.getreports("pytest_runtest_logreport") if r.failed]
    assert [r.when for r in failed] == ["teardown"], failed
    assert "1 exchange(s) still in flight (a stream left open?) 2 s after the test ended" in (
        failed[0].longreprtext
    )
    assert not (pytester.path / "cassettes" / "test_open").exists()
