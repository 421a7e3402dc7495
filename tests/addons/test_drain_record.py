"""A real `ssetape record` stopped with SIGTERM while a stream is in flight (issue 40).

The first SIGTERM drains: new connections are refused at once (a load balancer sends them
elsewhere), /readyz answers 503 while /healthz stays 200, a connection kept alive between
two requests is closed, and the stream in flight goes on to its end, byte for byte, stored
completed; then the proxy exits and its exit line, the last line it prints, says what
drained. A second signal stops at once; a stream that outlasts --drain-timeout is
interrupted at the deadline, and counted. Under load, stopping at once prints nothing
after the exit line (asyncio's "Task was destroyed but it is pending!" did)."""

from __future__ import annotations

import re
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import orjson
import pytest

from ssetape.addons.drain import DEADLINE
from ssetape.framing.sse import SseParser
from ssetape.simulator.simulator import Simulator
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from tests.addons.stores import Recorders
from tests.addons.test_admin_record import admin_url
from tests.conftest import Proc

WAIT = 30.0  # seconds a state may take to show (the machine is loaded)
EXIT = re.compile(r"^ssetape: \d+ events? in \d+ exchanges? stored, none lost; (.+)$")


@pytest.fixture(scope="module")
def slow_sim() -> Iterator[Simulator]:
    """At speed 1: a token every ~20 ms, so 300 tokens take ~6 s."""
    with Simulator(speed=1.0).serve_in_thread() as s:
        yield s


def chat(tokens: int, text: str = "drain") -> bytes:
    return orjson.dumps(
        {
            "model": "sim-plain",
            "stream": True,
            "max_tokens": tokens,
            "messages": [{"role": "user", "content": text}],
        }
    )


class Stream(threading.Thread):
    """A streaming request through the proxy, read to its end (or its cut)."""

    def __init__(self, url: str, body: bytes) -> None:
        super().__init__(daemon=True)
        self.url, self.body = url, body
        self.got = bytearray()
        self.started = threading.Event()
        self.error: Exception | None = None

    def run(self) -> None:
        headers = {"content-type": "application/json"}
        try:
            with httpx.stream(
                "POST", self.url + "/v1/chat/completions", content=self.body, headers=headers,
                timeout=60,
            ) as r:  # fmt: skip
                for chunk in r.iter_raw():
                    self.got += chunk
                    self.started.set()
        except httpx.HTTPError as e:
            self.error = e
        finally:
            self.started.set()


def direct(sim: Simulator, body: bytes) -> bytes:
    """The simulator's answer without the proxy (a deterministic function of the body)."""
    headers = {"content-type": "application/json"}
    r = httpx.post(sim.url + "/v1/chat/completions", content=body, headers=headers, timeout=60)
    return r.content


def refused(url: str) -> bool:
    where = urlsplit(url)
    try:
        socket.create_connection((where.hostname, where.port), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


def until(check: object, what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def exited(proc: Proc, timeout: float = WAIT * 2) -> list[str]:
    """Its exit code is 0; its output's lines, once all read."""
    assert proc.proc.wait(timeout) == 0, proc.log.decode()
    until(lambda: EXIT.search(proc.log.decode().splitlines()[-1]), proc.log.decode(), 10)
    time.sleep(0.2)  # anything after the exit line would be read by now
    return [line for line in proc.log.decode().splitlines() if line.strip()]


def events(body: bytes) -> int:
    parser = SseParser()
    return len(parser.feed(body)) + len(parser.close())


def exchanges(db: str) -> list[tuple[str, str | None, int]]:
    with Store.open(db, create=False) as store:
        return [(x.state, x.error, x.event_count) for x in Queries(store).exchanges()]


def test_sigterm_drains_the_stream_in_flight_and_refuses_new_connections(
    slow_sim: Simulator, recorders: Recorders, tmp_path: Path
) -> None:
    db = str(tmp_path / "tape.db")
    proc = recorders.start(db, "--mode", f"reverse:{slow_sim.url}", "--admin", "127.0.0.1:0")
    admin = admin_url(proc)
    where = urlsplit(proc.url)
    # A client that keeps its connection alive between two requests.
    idle = socket.create_connection((where.hostname, where.port), timeout=WAIT)
    small = chat(3, "keep-alive")
    idle.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n%s" % (len(small), small)
    )
    answer = b""
    while not answer.endswith(b"\r\n0\r\n\r\n"):  # the simulator's chunked SSE, whole
        answer += idle.recv(65536)
    body = chat(300)
    stream = Stream(proc.url, body)
    stream.start()
    assert stream.started.wait(WAIT) and stream.error is None, proc.log.decode()

    proc.proc.send_signal(signal.SIGTERM)
    until(lambda: httpx.get(admin + "/readyz", timeout=10).status_code == 503, "still ready")
    ready = httpx.get(admin + "/readyz", timeout=10).json()
    health = httpx.get(admin + "/healthz", timeout=10)
    until(lambda: refused(proc.url), "a new connection is still accepted")
    idle.settimeout(WAIT)
    closed = idle.recv(65536)  # the proxy closed the idle one: end of file, nothing more
    idle.close()
    stream.join(WAIT * 2)
    assert stream.is_alive() is False and stream.error is None, stream.error
    lines = exited(proc)

    assert ready["checks"]["accepting"] == {"ok": False, "state": "draining"}
    assert health.status_code == 200
    assert closed == b""
    assert bytes(stream.got) == direct(slow_sim, body)  # whole, byte for byte
    log = "\n".join(lines)
    assert "SIGTERM: draining 1 exchange in flight for at most 30 s" in log, log
    m = EXIT.match(lines[-1])
    assert m and re.fullmatch(r"drained 1 exchange in [\d.]+ s", m.group(1)), log
    assert "Task was destroyed" not in log and "Traceback" not in log
    stored = exchanges(db)
    assert [(state, error) for state, error, _ in stored] == [("completed", None)] * 2
    assert max(n for _, _, n in stored) == events(bytes(stream.got))


def test_a_second_signal_stops_at_once(
    slow_sim: Simulator, recorders: Recorders, tmp_path: Path
) -> None:
    db = str(tmp_path / "tape.db")
    proc = recorders.start(db, "--mode", f"reverse:{slow_sim.url}")
    stream = Stream(proc.url, chat(1000))  # ~20 s
    stream.start()
    assert stream.started.wait(WAIT) and stream.error is None, proc.log.decode()
    proc.proc.send_signal(signal.SIGTERM)
    until(lambda: "draining 1 exchange" in proc.log.decode(), proc.log.decode())
    t = time.monotonic()
    proc.proc.send_signal(signal.SIGINT)
    lines = exited(proc)
    took = time.monotonic() - t
    stream.join(WAIT)

    assert took < 10.0, took  # the stream had 15 s or more to go
    m = EXIT.match(lines[-1])
    assert m and m.group(1) == (
        "drained 0 exchanges, 1 exchange interrupted by a second signal (SIGINT)"
    ), lines
    assert stream.error is not None or b"[DONE]" not in stream.got  # cut
    [(state, _, _)] = exchanges(db)
    assert state == "interrupted"


def test_a_stream_that_outlasts_the_drain_timeout_is_interrupted_and_counted(
    slow_sim: Simulator, recorders: Recorders, tmp_path: Path
) -> None:
    db = str(tmp_path / "tape.db")
    proc = recorders.start(db, "--mode", f"reverse:{slow_sim.url}", "--drain-timeout", "1.5")
    stream = Stream(proc.url, chat(1000))  # ~20 s
    stream.start()
    assert stream.started.wait(WAIT) and stream.error is None, proc.log.decode()
    t = time.monotonic()
    proc.proc.send_signal(signal.SIGTERM)
    lines = exited(proc)
    took = time.monotonic() - t
    stream.join(WAIT)

    assert 1.4 < took < 12.0, took
    m = EXIT.match(lines[-1])
    assert m and m.group(1) == (
        "drained 0 exchanges, 1 exchange interrupted at the 1.5 s deadline"
    ), lines
    assert stream.error is not None or b"[DONE]" not in stream.got  # cut
    [(state, error, count)] = exchanges(db)
    assert (state, error) == ("interrupted", DEADLINE.format(1.5)) and count > 0


def test_under_load_nothing_is_printed_after_the_exit_line(
    slow_sim: Simulator, recorders: Recorders, tmp_path: Path
) -> None:
    """Stopped at once (--drain-timeout 0) while streams flow and new connections arrive:
    connections being accepted as the loop stopped were tasks asyncio reported destroyed."""
    db = str(tmp_path / "tape.db")
    proc = recorders.start(db, "--mode", f"reverse:{slow_sim.url}", "--drain-timeout", "0")
    streams = [Stream(proc.url, chat(300, f"load {i}")) for i in range(40)]
    for s in streams:
        s.start()
    for s in streams[:5]:
        assert s.started.wait(WAIT)
    stop = threading.Event()
    where = urlsplit(proc.url)

    def knock() -> None:  # new connections with a request, as fast as they go
        while not stop.is_set():
            try:
                with socket.create_connection((where.hostname, where.port), timeout=5) as c:
                    c.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
                              b"content-length: 2\r\n\r\n{}")  # fmt: skip
            except OSError:
                time.sleep(0.001)

    knockers = [threading.Thread(target=knock, daemon=True) for _ in range(8)]
    for k in knockers:
        k.start()
    time.sleep(0.5)
    proc.proc.send_signal(signal.SIGTERM)
    lines = exited(proc)
    stop.set()
    for k in knockers:
        k.join(10)
    log = "\n".join(lines)
    assert "Task was destroyed" not in log and "never awaited" not in log, log
    m = EXIT.match(lines[-1])
    assert m and "interrupted at the stop (drain timeout 0)" in m.group(1), log
