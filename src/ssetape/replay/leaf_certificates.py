"""TLS for forward-mode replay without mitmproxy: a server context per host, whose leaf
certificate is signed by the same CA as ``ssetape ca`` (mitmproxy's, in the confdir, loaded
or made by :class:`~mitmproxy.certs.CertStore` as the proxy does).

A client that trusts that CA for recording through the proxy trusts the direct replay server
too. Python's :mod:`ssl` loads certificates from files only, so each leaf and its key are
written once, in a private directory that lives as long as this object.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import shutil
import ssl
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID
from mitmproxy.certs import CertStore

__all__ = ["ALPN", "LeafCertificates"]

# What the direct server speaks, in the client's order of preference as TLS settles it.
ALPN = ("h2", "http/1.1")
KEY_SIZE = 2048  # mitmproxy's default `key_size`: the CA it makes is the one `ssetape ca` shows
MAX_HOSTS = 1024  # server contexts kept (one per host a client tunnels to)


class LeafCertificates:
    """Server-side TLS contexts, one per host name, made on first use and kept (LRU)."""

    def __init__(self, confdir: str | Path, *, alpn: tuple[str, ...] = ALPN) -> None:
        self.store = CertStore.from_store(Path(confdir).expanduser(), "mitmproxy", KEY_SIZE)
        # The leaves' key. mitmproxy's leaves reuse the CA's RSA key, which costs each TLS
        # handshake an RSA signature (~1.5 ms of this process's one loop): 200 clients at once
        # would wait 300 ms. An ECDSA P-256 signature costs a tenth of that.
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._ca = x509.load_pem_x509_certificate(self.store.default_ca.to_pem())
        ca_key = self._ca.public_key()
        assert isinstance(ca_key, rsa.RSAPublicKey | ec.EllipticCurvePublicKey)
        self._ca_key = ca_key
        self.alpn = list(alpn)
        self._dir = Path(tempfile.mkdtemp(prefix="ssetape-leaf-"))  # mode 0700
        self._contexts: OrderedDict[str, ssl.SSLContext] = OrderedDict()
        self._lock = threading.Lock()
        self._made = 0

    def cached(self, host: str) -> ssl.SSLContext | None:
        """The server context for ``host`` if it is made already. Without the lock, which
        :meth:`context` holds while it signs: the event loop calls this and must not wait
        for a signature (each call below is one atomic step under the GIL)."""
        host = host.lower().strip("[]")
        ctx = self._contexts.get(host)
        if ctx is not None:
            with contextlib.suppress(KeyError):  # evicted meanwhile: the context still serves
                self._contexts.move_to_end(host)
        return ctx

    def context(self, host: str) -> ssl.SSLContext:
        """The server context for ``host`` (a name or an IP address, as in CONNECT)."""
        host = host.lower().strip("[]")
        with self._lock:
            ctx = self._contexts.get(host)
            if ctx is not None:
                self._contexts.move_to_end(host)
                return ctx
            ctx = self._make(host)
            self._contexts[host] = ctx
            if len(self._contexts) > MAX_HOSTS:
                self._contexts.popitem(last=False)
            return ctx

    def _leaf(self, host: str) -> bytes:
        """A certificate for ``host`` signed by the CA, with its chain and key, as PEM."""
        try:
            san: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
        except ValueError:
            san = x509.DNSName(host)
        ca = self._ca
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host[:64])]))
            .issuer_name(ca.subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=2))
            .not_valid_after(now + datetime.timedelta(days=365))
            .add_extension(x509.SubjectAlternativeName([san]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            # Python 3.13's clients verify strictly (VERIFY_X509_STRICT): both identifiers.
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._ca_key),
                critical=False,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False
            )
            .add_extension(
                x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
            )
            .sign(self.store.default_privatekey, hashes.SHA256())
        )
        key = self._key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        chain = b"".join(c.to_pem() for c in self.store.default_chain_certs)
        return cert.public_bytes(serialization.Encoding.PEM) + chain + key

    def _make(self, host: str) -> ssl.SSLContext:
        self._made += 1
        pem = self._dir / f"{self._made}.pem"
        fd = os.open(pem, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(self._leaf(host))
        try:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(pem)
        finally:
            pem.unlink()  # loaded: the key need not stay on disk
        ctx.set_alpn_protocols(self.alpn)
        # TLS 1.3 servers send two session tickets after each handshake by default: each is
        # encrypted and written for a client that never resumes (an HTTP client keeps its
        # connection instead). In a burst of cold clients that is work on the loop they wait on.
        ctx.num_tickets = 0
        return ctx

    def close(self) -> None:
        with contextlib.suppress(OSError):
            shutil.rmtree(self._dir)
