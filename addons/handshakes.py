"""mitmproxy addon: a few TLS handshakes with local clients at once, as ``ssetape replay``'s
own server does (:mod:`ssetape.replay.admission` says why).

When a record mode may forward, replay keeps mitmproxy in the path, and a burst of clients
that tunnel at once makes its one event loop run their handshakes back to back while the
streams already playing wait. Here a CONNECT from this machine is answered when one of the
slots is free (mitmproxy sends its 200 only once every ``http_connect`` hook has returned);
the slot comes back when that client's handshake ends or fails, when the tunnel turns out
to carry no TLS (plain HTTP, or TCP passed through), when the CONNECT fails or the
connection closes, and otherwise after the hold. Clients on other machines are not held:
their round trips pace them already, and mitmproxy gives an addon no socket to read one from.
"""

from __future__ import annotations

from collections.abc import Callable

from mitmproxy import connection, http, tcp, tls

from ssetape.replay.admission import Admission, on_this_machine

__all__ = ["HandshakeSlots"]


class HandshakeSlots:
    def __init__(self, admission: Admission | None = None) -> None:
        self.admission = admission
        self._held: dict[str, Callable[[], None]] = {}  # client connection id -> release

    async def http_connect(self, flow: http.HTTPFlow) -> None:
        if flow.response is not None or flow.error is not None:
            return  # refused (proxy authentication) or killed: no handshake follows
        if not on_this_machine(flow.client_conn.peername):
            return
        if self.admission is None:  # made here: a semaphore belongs to the running loop
            self.admission = Admission()
        release = await self.admission.take()
        client = flow.client_conn
        if client.timestamp_end is not None:
            # It left while it waited (mitmproxy does not cancel a hook when a client goes):
            # its turn passes at once, and nothing is kept for it.
            release()
            return
        self._give_back(client)  # a second CONNECT on one connection
        self._held[client.id] = release

    def tls_established_client(self, data: tls.TlsData) -> None:
        self._give_back(data.context.client)

    def tls_failed_client(self, data: tls.TlsData) -> None:
        self._give_back(data.context.client)

    def http_connect_error(self, flow: http.HTTPFlow) -> None:
        self._give_back(flow.client_conn)

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        self._give_back(flow.client_conn)  # plain HTTP in the tunnel: no handshake came

    def tcp_start(self, flow: tcp.TCPFlow) -> None:
        self._give_back(flow.client_conn)  # passed through (ignore_hosts, tcp_hosts)

    def client_disconnected(self, client: connection.Client) -> None:
        self._give_back(client)

    def _give_back(self, client: connection.Client) -> None:
        release = self._held.pop(client.id, None)
        if release is not None:
            release()
