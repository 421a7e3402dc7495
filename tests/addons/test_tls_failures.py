"""Clients that fail their TLS handshake cannot flood the log: 300 tunnels through `ssetape
record` that send 64 KB of garbage each are two lines with the count (mitmproxy alone writes
a hex dump of each ClientHello and a traceback per tunnel, 40 MB), and a client after them is
served. In process: what the filter drops, what it lets through, and the burst's lines."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
import ssl
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import openai
import pytest

from ssetape.addons.tls_failures import MITM_LOGGER, TlsFailures, shortened
from ssetape.simulator.simulator import Simulator
from tests.conftest import Proc

TUNNELS = 300
# A TLS record holding the start of a ClientHello, then bytes that are no TLS record: mitmproxy
# cannot parse it, and the rest arrives after the handshake has failed.
GARBAGE = b"\x16\x03\x01\x00\x05\x01\x00\xff\xff\x00" + os.urandom(64 * 1024)


def garbage_tunnels(proxy_port: int, target: str, n: int) -> None:
    """``n`` tunnels, each sent a ClientHello mitmproxy cannot parse. mitmproxy 11 closes each
    at once; 12 keeps one open after its handshake failed, until the client leaves: they are
    all sent first, then closed here, so the test waits on neither."""
    tunnels = []
    try:
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", proxy_port), timeout=30)
            tunnels.append(s)
            s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
            assert s.recv(4096).startswith(b"HTTP/1.1 200")
            with contextlib.suppress(OSError):  # closed by the proxy already: it failed
                s.sendall(GARBAGE)
    finally:
        for s in tunnels:
            s.close()


def test_a_flood_of_garbage_handshakes_is_a_few_lines_with_the_count(
    tls_sim: tuple[Simulator, Path], ssetape_proc: Callable[..., Proc], confdir: Path
) -> None:
    sim, upstream_cert = tls_sim
    proc = ssetape_proc("record", "--set", f"ssl_verify_upstream_trusted_ca={upstream_cert}")
    port = int(proc.url.rsplit(":", 1)[1])
    target = sim.url.split("://", 1)[1].replace("127.0.0.1", "localhost")
    garbage_tunnels(port, target, TUNNELS)
    # A good client after them is served through a TLS tunnel of its own.
    verify = ssl.create_default_context(cafile=confdir / "mitmproxy-ca-cert.pem")
    with openai.DefaultHttpxClient(proxy=proc.url, verify=verify, timeout=30) as http:
        client = openai.OpenAI(
            base_url=f"https://{target}/v1", api_key="sk-x", max_retries=0, http_client=http
        )
        chunks = list(
            client.chat.completions.create(
                model="sim-chat", stream=True, messages=[{"role": "user", "content": "hi"}]
            )
        )
    assert chunks and chunks[-1].usage is not None
    assert proc.stop() == 0
    log = proc.log.decode()
    assert "Traceback" not in log and "crashed" not in log
    assert len(proc.log) < 4096, f"{len(proc.log)} bytes of log"
    lines = [line for line in log.splitlines() if "TLS handshake" in line]
    assert 1 <= len(lines) <= 4, log
    assert "Cannot parse ClientHello" in lines[0] and "bytes>" in lines[0]
    counted = 1 + sum(int(n) for n in re.findall(r"ssetape: (\d+) more client TLS", log))
    assert counted == TUNNELS, log
    assert "1 exchange stored" in log


# -- in process ------------------------------------------------------------------------


@pytest.fixture
def failures() -> Iterator[TlsFailures]:
    with warnings.catch_warnings():  # mitmproxy's test helpers import ldap3 and passlib
        warnings.simplefilter("ignore", DeprecationWarning)
        from mitmproxy.test import taddons

    addon = TlsFailures()
    with taddons.context(addon):
        yield addon
    addon.done()


def crash(exc: Exception, peer: tuple[str, int]) -> None:
    try:
        raise exc
    except Exception:
        logging.getLogger(MITM_LOGGER).error(
            "mitmproxy has crashed!", exc_info=True, extra={"client": peer}
        )


def test_failed_handshakes_are_counted_and_their_tracebacks_dropped(
    failures: TlsFailures, caplog: pytest.LogCaptureFixture
) -> None:
    mitm = logging.getLogger(MITM_LOGGER)
    with caplog.at_level(logging.INFO):
        for i in range(100):
            peer = ("127.0.0.1", 40000 + i)
            mitm.warning(
                "Client TLS handshake failed. Cannot parse ClientHello: " + "ab" * 65536,
                extra={"client": peer},
            )
            crash(AttributeError("'NoneType' object has no attribute 'bio_write'"), peer)
        crash(RuntimeError("something else"), ("127.0.0.1", 40001))  # not this failure
        crash(AttributeError("'NoneType' object has no attribute 'bio_write'"), ("10.0.0.1", 1))
        mitm.info("Client TLS handshake failed. The client disconnected during the handshake.")
        mitm.warning("a line of mitmproxy's that is no handshake")
        failures.done()  # flushes the count
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0] == (
        "ssetape: a client TLS handshake failed (Cannot parse ClientHello: <65536 bytes>; "
        "from 127.0.0.1:40000); further failures are counted, not logged one by one"
    )
    assert sum("crashed" in m for m in messages) == 2  # the unrelated ones are kept
    assert "Client TLS handshake failed. The client disconnected during the handshake." in messages
    assert "a line of mitmproxy's that is no handshake" in messages
    assert messages[-1] == (
        "ssetape: 99 more client TLS handshakes failed (the last: Cannot parse ClientHello: "
        "<65536 bytes>)"
    )
    assert max(len(m) for m in messages) < 400
    assert failures.burst.total == 100


def test_a_reason_keeps_its_words_and_loses_its_hex_dump() -> None:
    assert shortened("The client does not trust the proxy's certificate for x.test") == (
        "The client does not trust the proxy's certificate for x.test"
    )
    assert (
        shortened("Cannot parse ClientHello: " + "0f" * 40)
        == "Cannot parse ClientHello: <40 bytes>"
    )
    assert len(shortened("x" * 10_000)) == 301
