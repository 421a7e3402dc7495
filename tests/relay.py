"""A TCP relay the test controls, in front of a real server: a network path that can hang.

While frozen, the relay keeps every connection open but moves no byte either way, and new
connections are accepted but not carried on: what a dead route or a stuck middlebox does to
a client, which never hears a refusal. While blackholed, it reads and drops every byte, on
the connections it carries and on new ones, which it never carries on.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator


class Relay:
    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._flowing = threading.Event()
        self._flowing.set()
        self._dropping = threading.Event()
        self._closed = False
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @contextlib.contextmanager
    def frozen(self) -> Iterator[None]:
        self._flowing.clear()
        try:
            yield
        finally:
            self._flowing.set()

    @contextlib.contextmanager
    def blackholed(self) -> Iterator[None]:
        self._dropping.set()
        try:
            yield
        finally:
            self._dropping.clear()

    def close(self) -> None:
        self._closed = True
        self._flowing.set()
        for s in [self._listener, *self._sockets]:
            with contextlib.suppress(OSError):
                s.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._sockets.append(client)
            threading.Thread(target=self._carry, args=(client,), daemon=True).start()

    def _carry(self, client: socket.socket) -> None:
        self._flowing.wait()
        if self._dropping.is_set():
            with contextlib.suppress(OSError):
                while client.recv(65536):
                    pass
            return
        try:
            server = socket.create_connection(self.target)
        except OSError:
            client.close()
            return
        self._sockets.append(server)
        for a, b in ((client, server), (server, client)):
            threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                self._flowing.wait()  # frozen: hold it, never refuse
                if not self._dropping.is_set():
                    dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
