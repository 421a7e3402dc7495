"""Fixtures shared by the end-to-end tests: the simulated upstream and real ssetape processes."""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import re
import resource
import signal
import ssl
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

# Imported before any pytester run snapshots sys.modules. httpx imports httpcore on first use
# and keeps its exception classes from then on: a first use inside an in-process run left
# the rest of the worker a second httpcore, whose errors httpx no longer mapped (a cut
# stream's RemoteProtocolError escaped as httpcore's).
import httpcore  # noqa: F401
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from ssetape.simulator.simulator import Simulator

SSETAPE = str(Path(sys.executable).parent / "ssetape")
# Fast enough for a quick suite, slow enough that gaps (~10 ms) stand out from noise.
SIM_SPEED = 2.0
LISTEN = re.compile(rb"listening on http://([\d.]+):(\d+)")


# CI runs the suite once per Python. The heaviest end-to-end tests (marked ``once``, or in a
# file named here) run in its last stage only (Python 3.13, mitmproxy 12, the newest SDKs),
# so the whole run stays under its time budget: store faults and attacks, drains, the SDK and
# plugin sessions, the surfaces' agreement on big stores. What every stage runs: the unit
# tests and the proxy's core (record, replay, secrets, the loss ledger, crashes, stops).
# Locally everything runs.
ONCE_ELSEWHERE = "SSETAPE_TEST_ONCE_ELSEWHERE"
ONCE_FILES = frozenset(
    {
        "addons/test_admin_record.py", "addons/test_bedrock_boto3.py",
        "addons/test_drain_record.py", "addons/test_drain_websocket.py",
        "addons/test_fault_rates.py", "addons/test_gemini_record.py", "addons/test_guard.py",
        "addons/test_new_episodes_modes.py", "addons/test_new_episodes_plugin.py",
        "addons/test_ollama_ndjson.py", "addons/test_otlp_record.py",
        "addons/test_recorder_clock.py", "addons/test_recorder_failopen.py",
        "addons/test_recorder_faults.py", "addons/test_recorder_loss_log.py",
        "addons/test_recorder_pg.py", "addons/test_recorder_prune_settle.py",
        "addons/test_recorder_sessions.py", "addons/test_recorder_store_lost.py",
        "addons/test_stream_bounds.py", "addons/test_websocket_gemini_sdk.py",
        "addons/test_websocket_replay.py", "addons/test_websocket_sdks.py",
        "ssetape/analysis/test_absurd_numbers.py", "ssetape/cli/test_audit.py",
        "ssetape/cli/test_prompt_search.py", "ssetape/cli/test_prune_cli.py",
        "ssetape/cli/test_run.py", "ssetape/framing/test_decoders.py",
        "ssetape/mcp_server/test_arguments.py", "ssetape/mcp_server/test_sessions.py",
        "ssetape/mcp_server/test_ws_session.py", "ssetape/replay/test_miss_storm.py",
        "ssetape/test_figures.py", "ssetape/testing/test_cassette_age.py",
        "ssetape/testing/test_faults_plugin.py", "ssetape/testing/test_plugin_episodes.py",
        "ssetape/testing/test_plugin_shared_once.py", "ssetape/web/test_beside_proxy.py",
        "ssetape/web/test_session_page.py", "storage/test_schema_status.py",
    }
)  # fmt: skip
_TESTS = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not os.environ.get(ONCE_ELSEWHERE):
        return
    skip = pytest.mark.skip(reason=f"runs in CI's last stage only ({ONCE_ELSEWHERE} is set)")
    for item in items:
        heavy = item.path.relative_to(_TESTS).as_posix() in ONCE_FILES
        if heavy or item.get_closest_marker("once") is not None:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def sim() -> Iterator[Simulator]:
    with Simulator(speed=SIM_SPEED).serve_in_thread() as s:
        yield s


@dataclass
class Proc:
    """A running `ssetape` command (record/replay) whose output is collected."""

    proc: subprocess.Popen[bytes]
    url: str
    db: str
    output: list[bytes] = field(default_factory=list)

    def stop(self, timeout: float = 20) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout)
        return rc

    @property
    def log(self) -> bytes:
        return b"".join(self.output)


def start_ssetape(
    args: list[str],
    *,
    db: str,
    env: dict[str, str] | None = None,
    timeout: float = 30,
    fds: int | None = None,
    prefix: tuple[str, ...] = (),
) -> Proc:
    """``ssetape <args>`` until it listens; ``fds``: its descriptor limit (soft and hard);
    ``prefix``: a command that runs it (``setpriv ... --``)."""

    def limit() -> None:
        if fds is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (fds, fds))

    # From an empty folder, as a user would: nothing may depend on ./ssetape.db.
    proc = subprocess.Popen(
        [*prefix, SSETAPE, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {})},
        cwd=Path(db).parent,
        preexec_fn=limit if fds is not None else None,
    )
    assert proc.stdout is not None
    output: list[bytes] = []
    ready = threading.Event()
    found: list[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            output.append(line)
            m = LISTEN.search(line)
            if m and not found:
                found.append(f"http://{m.group(1).decode()}:{m.group(2).decode()}")
                ready.set()
        ready.set()

    threading.Thread(target=pump, daemon=True).start()
    if not ready.wait(timeout) or not found:
        proc.kill()
        raise RuntimeError(f"ssetape {args[0]} did not start: {b''.join(output).decode()}")
    return Proc(proc, found[0], db, output)


@pytest.fixture(scope="session")
def confdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One mitmproxy CA for the session: generating a key per test is slow. Made here, as
    `ssetape ca` makes it, so that a test may trust it before it starts any proxy (where
    mitmproxy is installed: the newest SDKs' stage of `.ci/run` runs without it)."""
    d = tmp_path_factory.mktemp("confdir")
    try:
        from mitmproxy.certs import CertStore
    except ImportError:
        return d
    CertStore.from_store(d, "mitmproxy", 2048)
    return d


@pytest.fixture
def ssetape_proc(tmp_path: Path, confdir: Path) -> Iterator[Callable[..., Proc]]:
    """Start `ssetape <args>`; every process is stopped (SIGTERM) and must exit 0."""
    started: list[Proc] = []

    def start(*args: str, db: str | None = None, env: dict[str, str] | None = None) -> Proc:
        db = db or str(tmp_path / "tape.db")
        p = start_ssetape(
            [*args, "--db", db, "--port", "0", "--confdir", str(confdir)], db=db, env=env
        )
        started.append(p)
        return p

    yield start
    for p in started:
        rc = p.stop()
        assert rc == 0, p.log.decode()


def self_signed(tmp: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp / "upstream.pem", tmp / "upstream.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


@pytest.fixture
def tls_sim(tmp_path: Path) -> Iterator[tuple[Simulator, Path]]:
    with tls_simulator(tmp_path) as pair:
        yield pair


@contextlib.contextmanager
def tls_simulator(tmp_path: Path) -> Iterator[tuple[Simulator, Path]]:
    """An HTTPS simulator with a self-signed certificate (yielded for the proxy to trust)."""
    cert, key = self_signed(tmp_path)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    with Simulator(speed=SIM_SPEED, ssl=ctx).serve_in_thread() as s:
        yield s, cert
