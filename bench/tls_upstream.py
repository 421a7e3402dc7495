"""The simulator over HTTPS, for benchmarks whose proxy forwards to an ``https://`` upstream.

    python -m bench.tls_upstream --port N --cert FILE

Writes a self-signed certificate for ``localhost`` and ``127.0.0.1`` to FILE (the proxy is
told to trust it, e.g. ``--set ssl_verify_upstream_trusted_ca=FILE``), then serves the
simulator with it until SIGTERM. A process of its own: streaming the benchmark's misses
costs the measuring client nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import ipaddress
import signal
import ssl
import tempfile
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from ssetape.simulator.simulator import Simulator

__all__ = ["self_signed"]


def self_signed(cert_file: Path) -> ssl.SSLContext:
    """A server context with a new self-signed certificate, written to ``cert_file``."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    san = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(san), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with tempfile.TemporaryDirectory() as tmp:  # load_cert_chain reads files only
        key_file = Path(tmp) / "key.pem"
        key_file.write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()))  # fmt: skip
        ctx.load_cert_chain(cert_file, key_file)
    return ctx


async def serve(port: int, cert_file: Path) -> None:
    sim = Simulator(port=port, ssl=self_signed(cert_file))
    await sim.start()
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(sim.serve_forever())
    loop.add_signal_handler(signal.SIGTERM, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await task


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.tls_upstream")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--cert", type=Path, required=True)
    args = ap.parse_args()
    asyncio.run(serve(args.port, args.cert))


if __name__ == "__main__":
    main()
