"""`--web` of `ssetape record`, `replay` and `run`: the viewer served beside the proxy, on the
same store, as real processes; what the client received is on its pages; a SIGTERM stops both."""

from __future__ import annotations

import html
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import orjson
import pytest

from ssetape.simulator.simulator import Simulator
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from tests.conftest import SSETAPE, Proc
from tests.ssetape.cli.test_run import user_env

pytestmark = pytest.mark.slow

VIEWER = re.compile(r"ssetape web: listening on (http://127\.0\.0\.1:\d+)")
CHAT = {
    "model": "sim-chat",
    "stream": True,
    "messages": [{"role": "user", "content": "Tell me about tapes"}],
}
# What a client does through the proxy of `ssetape run`: its variables, nothing in the code.
APP = """
import sys, httpx, orjson
body = orjson.loads(sys.argv[2])
with httpx.Client(timeout=30) as c:
    r = c.post(sys.argv[1] + "/v1/chat/completions", content=orjson.dumps(body))
print(r.text, end="")
sys.exit(3)
"""


def viewer_url(lines: Callable[[], str], timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = VIEWER.search(lines())
        if m:
            return m.group(1)
        time.sleep(0.05)
    raise AssertionError(f"no viewer line in: {lines()}")


def chat(base: str) -> str:
    """One streamed chat through ``base``: the text the client assembled."""
    with httpx.Client(timeout=30) as c:
        r = c.post(base + "/v1/chat/completions", content=orjson.dumps(CHAT))
    assert r.status_code == 200
    return assembled(r.text)


def assembled(sse: str) -> str:
    text = ""
    for line in sse.splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            for choice in orjson.loads(line[6:]).get("choices", []):
                text += choice["delta"].get("content") or ""
    assert text
    return text


def recorded(db: str, timeout: float = 30) -> list[int]:
    """The ids of the exchanges stored, once every one is complete."""
    deadline = time.monotonic() + timeout
    while True:
        store = Store.open(db, create=False)
        try:
            rows = Queries(store).exchanges()
        finally:
            store.close()
        done = bool(rows) and all(x.state != "recording" for x in rows)
        if done or time.monotonic() > deadline:
            return [x.id for x in rows]
        time.sleep(0.1)


def assert_shown(web: str, exchange_id: int, text: str) -> None:
    """The exchange is in the list at ``/`` and its page says what the client received."""
    with httpx.Client(timeout=30) as c:
        listing = c.get(web + "/")
        assert listing.status_code == 200
        assert f'href="/exchanges/{exchange_id}"' in listing.text
        one = c.get(f"{web}/exchanges/{exchange_id}")
    assert one.status_code == 200
    assert text in html.unescape(one.text)


def assert_gone(web: str) -> None:
    with pytest.raises(httpx.ConnectError):
        httpx.get(web + "/", timeout=5)


def test_record_serves_the_viewer_of_what_it_records_and_stops_with_it(
    sim: Simulator, ssetape_proc: Callable[..., Proc]
) -> None:
    rec = ssetape_proc("record", "--mode", f"reverse:{sim.url}", "--web", "0")
    web = viewer_url(lambda: rec.log.decode())
    assert web != rec.url  # the proxy's line is the first "listening on", as it was
    text = chat(rec.url)
    [exchange_id] = recorded(rec.db)
    assert_shown(web, exchange_id, text)
    assert rec.stop() == 0, rec.log.decode()
    assert_gone(web)


@pytest.mark.parametrize(
    "how",
    [[], ["--record-mode", "new_episodes"]],
    ids=["direct-front", "through-mitmproxy"],
)
def test_replay_serves_the_viewer_of_its_tape_and_stops_with_it(
    sim: Simulator, ssetape_proc: Callable[..., Proc], how: list[str]
) -> None:
    rec = ssetape_proc("record", "--mode", f"reverse:{sim.url}")
    text = chat(rec.url)
    [exchange_id] = recorded(rec.db)
    assert rec.stop() == 0
    replay = ssetape_proc(
        "replay", "--speed", "0", "--mode", f"reverse:{sim.url}", *how, "--web", "0", db=rec.db
    )
    web = viewer_url(lambda: replay.log.decode())
    assert chat(replay.url) == text  # served from the tape while the viewer serves
    assert_shown(web, exchange_id, text)
    assert replay.stop() == 0, replay.log.decode()
    assert_gone(web)


def test_run_names_the_viewer_where_to_look_and_a_sigterm_stops_it(
    sim: Simulator, tmp_path: Path, confdir: Path
) -> None:
    (tmp_path / "app.py").write_text(APP)
    proc = subprocess.Popen(
        [SSETAPE, "run", "--db", "tape.db", "--confdir", str(confdir), "--web", "0", "--",
         sys.executable, "app.py", sim.url, orjson.dumps(CHAT).decode()],
        cwd=tmp_path, env=user_env(), stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    err: list[str] = []
    out: list[str] = []
    threading.Thread(target=lambda: err.extend(proc.stderr or []), daemon=True).start()
    threading.Thread(target=lambda: out.extend(proc.stdout or []), daemon=True).start()
    try:
        web = viewer_url(lambda: "".join(err))
        # The command has exited (its request recorded); the viewer stays, named last.
        deadline = time.monotonic() + 30
        while "see: " + web not in "".join(err) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert f"see: {web} " in "".join(err), "".join(err)
        [exchange_id] = recorded(str(tmp_path / "tape.db"))
        while "data: [DONE]" not in "".join(out) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert_shown(web, exchange_id, assembled("".join(out)))
        proc.terminate()
        assert proc.wait(20) == 3, "".join(err)  # the command's exit code
        assert_gone(web)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
