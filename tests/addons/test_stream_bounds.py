"""An HTTP/2 rapid reset (HEADERS then RST_STREAM on new stream ids) cannot take `ssetape
record`: the attacking connection is closed, logged once with counts, no exchange is stored
for a stream reset before its request was whole, and another client is served meanwhile.
In process: which connection the guard closes, and which it leaves alone."""

from __future__ import annotations

import importlib.metadata
import re
import socket
import ssl
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.exceptions
import openai
import pytest
from mitmproxy import connection, exceptions, flow, http

from ssetape.addons.guard import ConnectionGuard
from ssetape.simulator.simulator import Simulator
from ssetape.storage.models import Exchange
from ssetape.storage.queries import Queries
from ssetape.storage.runs import Runs
from ssetape.storage.store import Store
from ssetape.vocabulary import ExchangeState, RunState
from tests.conftest import Proc

STREAMS = 10_000  # the attacker's, at most
ATTACK_FOR = 60.0  # seconds, at most
# mitmproxy 12 holds against a rapid reset by itself, and the guard's bounds are not reached
# there (issue 39 measured 3 rows and others served within 2.1 s): the test then checks what a
# user sees, the others served and the attacker's streams not stored, not the guard closing it.
MITMPROXY_MAJOR = int(importlib.metadata.version("mitmproxy").split(".")[0])
INTERRUPTED = re.compile(r"(\d+) exchanges? (?:in flight )?interrupted")
DRAINED = re.compile(r"drained (\d+) exchange")


def interrupted_in(log: str) -> int:
    """How many exchanges the exit line says the stop interrupted (none when it says
    nothing of it)."""
    found = INTERRUPTED.findall(log)
    return int(found[-1]) if found else 0


class Attacker(threading.Thread):
    """One HTTP/2 connection through the forward proxy that opens and resets streams."""

    def __init__(self, proxy_port: int, target: str, ca: Path, whole: bool) -> None:
        super().__init__(daemon=True)
        self.port, self.target, self.ca, self.whole = proxy_port, target, ca, whole
        self.sent = 0
        self.closed_by_proxy = False
        self.started = threading.Event()

    def run(self) -> None:
        raw = socket.create_connection(("127.0.0.1", self.port), timeout=30)
        raw.sendall(f"CONNECT {self.target} HTTP/1.1\r\nHost: {self.target}\r\n\r\n".encode())
        assert raw.recv(4096).startswith(b"HTTP/1.1 200")
        context = ssl.create_default_context(cafile=self.ca)
        context.set_alpn_protocols(["h2"])
        with context.wrap_socket(raw, server_hostname="localhost") as s:
            assert s.selected_alpn_protocol() == "h2"
            conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
            conn.initiate_connection()
            head = [(":method", "POST"), (":path", "/v1/chat/completions"),
                    (":scheme", "https"), (":authority", self.target),
                    ("content-type", "application/json")]  # fmt: skip
            deadline = time.monotonic() + ATTACK_FOR
            try:
                while self.sent < STREAMS and time.monotonic() < deadline:
                    for _ in range(100):
                        sid = conn.get_next_available_stream_id()
                        # A body never sent (``whole`` False): the request is never complete.
                        conn.send_headers(sid, head, end_stream=self.whole)
                        conn.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
                        self.sent += 1
                    s.sendall(conn.data_to_send())
                    self.started.set()
                s.settimeout(max(0.1, deadline - time.monotonic()))
                while data := s.recv(65536):  # GOAWAY or nothing: then the proxy closes
                    conn.receive_data(data)
                self.closed_by_proxy = True
            except TimeoutError:
                pass  # still open when the attack's time was up
            except (OSError, h2.exceptions.ProtocolError):
                self.closed_by_proxy = True  # reset by the proxy
            finally:
                self.started.set()


@pytest.mark.parametrize("whole", [False, True], ids=["body-never-sent", "whole-request"])
def test_a_rapid_reset_is_closed_and_others_are_served_meanwhile(
    tls_sim: tuple[Simulator, Path], ssetape_proc: Callable[..., Proc], confdir: Path, whole: bool
) -> None:
    # A stop that drains nothing: whatever the attack left in flight must be interrupted.
    proc, attacker = attacked(tls_sim, ssetape_proc, confdir, whole, "0")
    target, ca = attacker.target, attacker.ca
    started = time.monotonic()
    verify = ssl.create_default_context(cafile=ca)
    with openai.DefaultHttpxClient(proxy=proc.url, verify=verify, timeout=60) as http_client:
        client = openai.OpenAI(
            base_url=f"https://{target}/v1", api_key="sk-x", max_retries=0, http_client=http_client
        )
        chunks = list(
            client.chat.completions.create(
                model="sim-chat", stream=True, messages=[{"role": "user", "content": "hi"}]
            )
        )
    served_in = time.monotonic() - started
    attacker.join(ATTACK_FOR + 30)
    assert chunks and chunks[-1].usage is not None
    assert served_in < 30, f"the other client waited {served_in:.1f} s"
    if MITMPROXY_MAJOR < 12:
        # mitmproxy 11 relays every stream it is sent: only the guard's bounds stop it.
        closed = attacker.closed_by_proxy
        assert closed, f"the proxy kept the attacker after {attacker.sent} streams"
    assert proc.stop() == 0
    log = proc.log.decode()
    if MITMPROXY_MAJOR < 12:
        # Whichever bound the proxy saw passed first: its streams in flight or its resets.
        lines = [li for li in log.splitlines() if "ssetape_max_" in li or "more client" in li]
        assert 1 <= len(lines) <= 4 and "closing client connections" in lines[0], log
    attack_rows = len(stopped_clean(proc)) - 1  # the other client's is stored
    if whole:
        assert attack_rows <= 1000 + 1, attack_rows  # whole requests, up to the bound in flight
    else:
        assert attack_rows == 0  # none of them was ever a whole request


@pytest.mark.parametrize("drain", ["0", "5"], ids=["at-once", "drained"])
@pytest.mark.parametrize("whole", [False, True], ids=["body-never-sent", "whole-request"])
def test_a_stop_during_a_rapid_reset_leaves_no_exchange_recording(
    tls_sim: tuple[Simulator, Path],
    ssetape_proc: Callable[..., Proc],
    confdir: Path,
    whole: bool,
    drain: str,
) -> None:
    """SIGTERM while the attack goes on: the exit line counts the exchanges the store
    holds, not the streams the attacker opened (issue 39: 76,290 rows left "recording"
    while the run said none lost)."""
    proc, attacker = attacked(tls_sim, ssetape_proc, confdir, whole, drain)
    while attacker.sent < 1000 and attacker.is_alive():
        time.sleep(0.01)
    assert proc.stop(timeout=120) == 0
    attacker.join(ATTACK_FOR + 30)
    rows = stopped_clean(proc)
    if not whole:
        assert not rows  # none of them was ever a whole request


def attacked(
    tls_sim: tuple[Simulator, Path], ssetape_proc: Callable[..., Proc], confdir: Path,
    whole: bool, drain: str,
) -> tuple[Proc, Attacker]:  # fmt: skip
    """`ssetape record` and an attacker through it, started."""
    sim, upstream_cert = tls_sim
    # An idle deadline far beyond the test's: only the stream bounds may close the attacker.
    proc = ssetape_proc("record", "--set", f"ssl_verify_upstream_trusted_ca={upstream_cert}",
                        "--set", "ssetape_header_timeout=3600",
                        "--drain-timeout", drain)  # fmt: skip
    port = int(proc.url.rsplit(":", 1)[1])
    target = sim.url.split("://", 1)[1].replace("127.0.0.1", "localhost")
    attacker = Attacker(port, target, confdir / "mitmproxy-ca-cert.pem", whole)
    attacker.start()
    assert attacker.started.wait(30)
    return proc, attacker


def stopped_clean(proc: Proc) -> list[Exchange]:
    """The rows of a stopped recorder, checked: after a clean stop nothing is left
    "recording" (issue 39 found 76,290 so on mitmproxy 11 while the run said none lost);
    what the stop cut short is interrupted, and the exit line counts those and those it let
    end as the rows they are, not as the streams the attacker opened; none lost."""
    log = proc.log.decode()
    assert "Traceback" not in log
    store = Store.open(proc.db, create=False)
    try:
        rows = Queries(store).exchanges()
        runs = Runs(store).totals()
    finally:
        store.close()
    states = Counter(r.state for r in rows)
    assert states[ExchangeState.RECORDING] == 0, states
    assert states[ExchangeState.INTERRUPTED] == interrupted_in(log), (states, log)
    drained = DRAINED.findall(log)
    ended = int(drained[-1]) if drained else 0  # those the drain let end: each a row
    assert ended <= len(rows) - states[ExchangeState.INTERRUPTED], (ended, states)
    (run,) = runs["runs"]
    assert run["status"] == RunState.STOPPED and run["stopped_at"] is not None
    assert run["exchanges_recorded"] == len(rows) and run["exchanges_lost"] == 0, run
    return rows


# -- in process ------------------------------------------------------------------------


@pytest.fixture
def guard() -> Iterator[tuple[ConnectionGuard, Any]]:
    with warnings.catch_warnings():  # mitmproxy's test helpers import ldap3 and passlib
        warnings.simplefilter("ignore", DeprecationWarning)
        from mitmproxy.test import taddons

    g = ConnectionGuard()
    with taddons.context(g) as tctx:
        tctx.configure(g, ssetape_max_connections=100, ssetape_max_streams=10, ssetape_max_resets=5)
        yield g, tctx


def stream_of(c: connection.Client) -> http.HTTPFlow:
    from mitmproxy.test import tflow

    f = tflow.tflow()
    f.client_conn = c
    f.live = True
    return f


def reset(g: ConnectionGuard, c: connection.Client) -> http.HTTPFlow:
    f = stream_of(c)
    g.requestheaders(f)
    f.error = flow.Error("stream reset by client (CANCEL)")
    g.error(f)
    return f


def new_client(g: ConnectionGuard) -> connection.Client:
    from mitmproxy.test import tflow

    c = tflow.tclient_conn()
    g.client_connected(c)
    return c


def test_resets_past_the_bound_close_the_connection_and_kill_what_it_sent(
    guard: tuple[ConnectionGuard, Any],
) -> None:
    g, _ = guard
    attacker, other = new_client(g), new_client(g)
    for _ in range(5):
        reset(g, attacker)
        reset(g, other)
    assert attacker.id in g._clients and g.too_many_resets.total == 0  # at the bound: kept
    reset(g, attacker)
    assert attacker.id not in g._clients and g.too_many_resets.total == 1
    late = stream_of(attacker)  # read before the connection closed
    g.requestheaders(late)
    assert late.error is not None and late.error.msg == flow.Error.KILLED_MESSAGE
    assert other.id in g._clients  # the other connection is untouched
    fine = stream_of(other)
    g.requestheaders(fine)
    assert fine.error is None


def test_resets_spread_over_time_and_other_errors_are_not_counted(
    guard: tuple[ConnectionGuard, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    g, _ = guard
    c = new_client(g)
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    for _ in range(20):
        for _ in range(5):
            reset(g, c)
        now[0] += 1.5  # five a window, again and again
    for _ in range(20):
        f = stream_of(c)
        g.requestheaders(f)
        f.error = flow.Error("Client disconnected.")
        g.error(f)
    assert c.id in g._clients and g.too_many_resets.total == 0


def test_requests_in_flight_past_the_bound_close_the_connection(
    guard: tuple[ConnectionGuard, Any],
) -> None:
    g, _ = guard
    piling, steady = new_client(g), new_client(g)
    for _ in range(50):  # one at a time, each answered: never more than one in flight
        f = stream_of(steady)
        g.requestheaders(f)
        g.request(f)
        g.response(f)
    flows = [stream_of(piling) for _ in range(11)]
    for f in flows[:10]:
        g.requestheaders(f)
        g.request(f)
    assert piling.id in g._clients and g.too_many_streams.total == 0
    g.requestheaders(flows[10])
    assert piling.id not in g._clients and g.too_many_streams.total == 1
    assert steady.id in g._clients


@pytest.mark.parametrize("option", ["ssetape_max_streams", "ssetape_max_resets"])
def test_bad_stream_bounds_are_option_errors(
    guard: tuple[ConnectionGuard, Any], option: str
) -> None:
    g, tctx = guard
    with pytest.raises(exceptions.OptionsError, match="below the least allowed, 0"):
        tctx.configure(g, **{option: -1})
    tctx.configure(g, **{option: 0})  # no bound
