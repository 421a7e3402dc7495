"""`ssetape record --admin`, end to end: a load balancer's health check gets 200 from
/healthz and /readyz while the proxy records a stream from the simulator, the admin address
chosen for port 0 is printed at start, and a bad address stops the start with one line."""

from __future__ import annotations

import re
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import orjson

from ssetape.simulator.simulator import Simulator
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from tests.conftest import SSETAPE, Proc

ADMIN = re.compile(r"ssetape admin: listening on (http://127\.0\.0\.1:\d+) ")


def admin_url(proc: Proc) -> str:
    deadline = time.monotonic() + 30
    while not (m := ADMIN.search(proc.log.decode())):
        assert time.monotonic() < deadline, proc.log.decode()
        time.sleep(0.05)
    return m.group(1)


def test_healthz_answers_200_while_it_records_a_stream(
    sim: Simulator, ssetape_proc: Callable[..., Proc]
) -> None:
    proc = ssetape_proc("record", "--mode", f"reverse:{sim.url}", "--admin", "127.0.0.1:0")
    admin = admin_url(proc)
    body = {
        "model": "sim-plain",
        "stream": True,
        "max_tokens": 400,
        "messages": [{"role": "user", "content": "health"}],
    }
    streamed: list[bytes] = []
    started = threading.Event()

    def client() -> None:
        with httpx.stream("POST", proc.url + "/v1/chat/completions", json=body, timeout=60) as r:
            for chunk in r.iter_bytes():
                started.set()
                streamed.append(chunk)

    reader = threading.Thread(target=client)
    reader.start()
    assert started.wait(30)
    answers = []
    while reader.is_alive() or not answers:  # asked as a load balancer would, mid-stream
        for path in ("/healthz", "/readyz"):
            r = httpx.get(admin + path, timeout=10)
            answers.append((path, r.status_code, orjson.loads(r.content)))
        time.sleep(0.2)
    reader.join()
    assert b"[DONE]" in b"".join(streamed)
    assert {(path, status) for path, status, _ in answers} == {
        ("/healthz", 200),
        ("/readyz", 200),
    }, answers
    _, _, last = answers[-1]
    assert last["status"] == "ok" and last["checks"]["store"] == {"ok": True, "state": "writing"}
    assert proc.stop() == 0, proc.log.decode()
    with Store.open(proc.db, create=False) as store:
        [exchange] = list(Queries(store).exchanges())
    assert exchange.state == "completed"
    try:
        httpx.get(admin + "/healthz", timeout=5)
        raise AssertionError("the admin address still answers after the proxy stopped")
    except httpx.ConnectError:
        pass


def test_a_bad_admin_address_is_one_line(tmp_path: Path, confdir: Path) -> None:
    where = ["--port", "0", "--db", str(tmp_path / "t.db"), "--confdir", str(confdir)]
    out = subprocess.run(
        [SSETAPE, "record", "--admin", "127.0.0.1:http", *where],
        capture_output=True,
        timeout=60,
        cwd=tmp_path,
    )
    err = out.stderr.decode().strip()
    assert out.returncode != 0 and "ssetape_admin" in err and "HOST:PORT" in err
    assert len(err.splitlines()) == 1, err
