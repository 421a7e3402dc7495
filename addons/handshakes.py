"""mitmproxy addon: a few TLS handshakes with local clients at once, as ``ssetape replay``'s
own server does (:mod:`ssetape.replay.admission` says why).

When a record mode may forward, replay keeps mitmproxy in the path, and a burst of clients
that tunnel at once makes its one event loop run their handshakes back to back while the
streams already playing wait. Here a CONNECT from this machine is answered when one of the
slots is free; the slot comes back when that client's handshake ends or fails, or after the
hold. Clients on other machines are not held: their round trips pace them already, and
mitmproxy gives an addon no way to read one.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

from mitmproxy import connection, http, tls

from ssetape.replay.admission import Admission

__all__ = ["HandshakeSlots"]


class HandshakeSlots:
    def __init__(self, admission: Admission | None = None) -> None:
        self.admission = admission
        self._held: dict[str, Callable[[], None]] = {}  # client connection id -> release

    async def http_connect(self, flow: http.HTTPFlow) -> None:
        if not _local(flow.client_conn):
            return
        if self.admission is None:  # made here: a semaphore belongs to the running loop
            self.admission = Admission()
        release = await self.admission.take()
        if flow.client_conn.id in self._held:  # a second CONNECT on one connection
            self._held.pop(flow.client_conn.id)()
        self._held[flow.client_conn.id] = release

    def tls_established_client(self, data: tls.TlsData) -> None:
        self._give_back(data.context.client)

    def tls_failed_client(self, data: tls.TlsData) -> None:
        self._give_back(data.context.client)

    def client_disconnected(self, client: connection.Client) -> None:
        self._give_back(client)

    def _give_back(self, client: connection.Client) -> None:
        release = self._held.pop(client.id, None)
        if release is not None:
            release()


def _local(client: connection.Client) -> bool:
    try:
        return ipaddress.ip_address(client.peername[0]).is_loopback
    except (TypeError, IndexError, ValueError):
        return True  # not an IP socket
