"""Slow and stalled clients cannot take the proxy: `ssetape record` with the usual 1,024
descriptors serves an official SDK client while 2,000 connections that never finish their
request head are held, logs a few lines instead of a traceback per connection, and closes
the stalled ones once ``ssetape_header_timeout`` passes. In process: the guard's bookkeeping
(which connection goes first, what is exempt, what is logged)."""

from __future__ import annotations

import logging
import resource
import socket
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from mitmproxy import connection, exceptions, http

from ssetape.addons.guard import ConnectionGuard, LogBurst, auto_max_connections
from ssetape.simulator.simulator import Simulator
from tests.conftest import start_ssetape

HALF_OPEN = 2000
CHILD_FDS = 1024  # the usual soft limit, and the proxy may not raise it


@pytest.fixture
def many_fds() -> Iterator[None]:
    """This process holds the half-open connections: raise its own limit for them."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = HALF_OPEN + 256
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.skip(f"the hard descriptor limit ({hard}) is below the {need} this test holds")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, need), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def half_open(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: api.openai.com\r\nContent-Le")
    return s


def closed_by_peer(s: socket.socket) -> bool:
    s.setblocking(False)
    try:
        return s.recv(1) == b""
    except BlockingIOError:
        return False  # still open, nothing to read
    except OSError:
        return True  # reset


@pytest.mark.slow
def test_a_client_is_served_while_2000_stalled_connections_are_held(
    tmp_path: Path, confdir: Path, many_fds: None
) -> None:
    db = tmp_path / "tape.db"
    timeout = 8
    with Simulator(speed=50).serve_in_thread() as sim:
        proc = start_ssetape(
            ["record", "--db", str(db), "--port", "0", "--confdir", str(confdir),
             "--mode", f"reverse:{sim.url}", "--set", f"ssetape_header_timeout={timeout}"],
            db=str(db), fds=CHILD_FDS,
        )  # fmt: skip
        port = int(proc.url.rsplit(":", 1)[1])
        held: list[socket.socket] = []
        try:
            held = [half_open(port) for _ in range(HALF_OPEN)]  # none refused
            started = time.monotonic()
            client = openai.OpenAI(base_url=proc.url + "/v1", api_key="sk-x", max_retries=0)
            stream = client.chat.completions.create(
                model="sim-chat",
                messages=[{"role": "user", "content": "still there?"}],
                stream=True,
                timeout=10,
            )
            text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
            probe_took = time.monotonic() - started
            assert text and probe_took < 5
            # The stalled connections go once their time is up (the sweep runs every second).
            time.sleep(timeout + 2)
            still = [s for s in held if not closed_by_peer(s)]
            assert not still, f"{len(still)} stalled connections still open"
        finally:
            for s in held:
                s.close()
            assert proc.stop() == 0, proc.log.decode()
    log = proc.log.decode()
    assert "Traceback" not in log and "Too many open files" not in log
    guard_lines = [line for line in log.splitlines() if "connection" in line.lower()]
    assert 1 <= len(guard_lines) <= 8, log  # a few lines per burst, never one per connection
    assert "ssetape: 1 event" in log or "1 exchange stored" in log  # the probe was recorded


# -- in process ------------------------------------------------------------------------


@pytest.fixture
def guard() -> Iterator[tuple[ConnectionGuard, Any]]:
    with warnings.catch_warnings():  # mitmproxy's test helpers import ldap3 and passlib
        warnings.simplefilter("ignore", DeprecationWarning)
        from mitmproxy.test import taddons

    g = ConnectionGuard()
    with taddons.context(g) as tctx:
        tctx.configure(g, ssetape_max_connections=3, ssetape_header_timeout="10")
        yield g, tctx


def client() -> connection.Client:
    from mitmproxy.test import tflow

    return tflow.tclient_conn()


def flow_of(c: connection.Client) -> http.HTTPFlow:
    from mitmproxy.test import tflow

    f = tflow.tflow()
    f.client_conn = c
    return f


def test_at_the_cap_the_longest_waiting_connection_makes_room(
    guard: tuple[ConnectionGuard, Any],
) -> None:
    g, _ = guard
    a, b, c, d = client(), client(), client(), client()
    for x in (a, b, c):
        g.client_connected(x)
    busy = flow_of(a)
    g.request(busy)  # a has a request in flight
    g.client_connected(d)
    assert d.error is None
    assert set(g._clients) == {a.id, c.id, d.id}  # b waited longest


def test_when_every_connection_is_busy_the_new_one_is_refused(
    guard: tuple[ConnectionGuard, Any], caplog: pytest.LogCaptureFixture
) -> None:
    g, _ = guard
    clients = [client() for _ in range(3)]
    for x in clients:
        g.client_connected(x)
        g.request(flow_of(x))
    late = [client() for _ in range(50)]
    with caplog.at_level(logging.WARNING):
        for x in late:
            g.client_connected(x)
    assert all("ssetape_max_connections" in (x.error or "") for x in late)
    assert g.refused.total == 50
    assert len(caplog.records) == 1  # one line for the burst, the count comes later
    with caplog.at_level(logging.WARNING):
        g.done()  # stopping inside the quiet period: the count is not lost
    assert caplog.records[-1].getMessage().startswith("ssetape: 49 more")


def test_idle_connections_expire_tunnels_and_busy_ones_do_not(
    guard: tuple[ConnectionGuard, Any],
) -> None:
    g, _ = guard
    stalled, busy, socket_ = client(), client(), client()
    for x in (stalled, busy, socket_):
        g.client_connected(x)
    g.request(flow_of(busy))
    ws = flow_of(socket_)
    g.request(ws)
    g.websocket_start(ws)
    g.response(ws)  # the 101: the tunnel carries no more requests
    assert g.expire(time.monotonic() + 5) == 0
    assert g.expire(time.monotonic() + 11) == 1
    assert set(g._clients) == {busy.id, socket_.id}


def test_a_finished_request_restarts_the_clock(guard: tuple[ConnectionGuard, Any]) -> None:
    g, _ = guard
    c = client()
    g.client_connected(c)
    f = flow_of(c)
    g.request(f)
    g._idle.clear()  # as if long ago
    g.response(f)
    g.error(f)  # both hooks for one flow count once
    assert g.expire(time.monotonic() + 5) == 0
    assert g.expire(time.monotonic() + 11) == 1


def test_a_request_whose_body_is_still_arriving_waits_like_a_head(
    guard: tuple[ConnectionGuard, Any],
) -> None:
    """Its head is in (``requestheaders``) but not its body (no ``request`` hook yet): it is
    closed at the timeout, and at the cap it makes room for a new client."""
    g, _ = guard
    trickling, busy, other = client(), client(), client()
    for x in (trickling, busy, other):
        g.client_connected(x)
    g.request(flow_of(busy))  # `trickling` and `other` sent a head; their bodies trickle
    late = client()
    g.client_connected(late)  # at the cap: the one waiting longest goes
    assert late.error is None and trickling.id not in g._clients
    assert g.expire(time.monotonic() + 11) == 2  # `other`'s body never came, nor `late`'s head
    assert set(g._clients) == {busy.id}


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("ssetape_header_timeout", "0", "between 1 and 86400"),
        ("ssetape_header_timeout", "soon", "between 1 and 86400"),
        ("ssetape_max_connections", -1, "below the least allowed, 0"),
    ],
)
def test_bad_values_are_option_errors(
    guard: tuple[ConnectionGuard, Any], option: str, value: object, message: str
) -> None:
    g, tctx = guard
    with pytest.raises(exceptions.OptionsError, match=message):
        tctx.configure(g, **{option: value})


def test_the_default_cap_fits_the_descriptor_limit() -> None:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert auto_max_connections() * 2 < soft


def test_a_burst_is_one_line_then_counts(caplog: pytest.LogCaptureFixture) -> None:
    burst = LogBurst("started", "{n} more", quiet=10)
    with caplog.at_level(logging.WARNING):
        for t in range(100):
            burst.hit(now=t * 0.01)
        burst.flush(now=5)
        burst.flush(now=11)
    assert [r.getMessage() for r in caplog.records] == ["started", "99 more"]
