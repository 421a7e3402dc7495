"""Upstreams no real API would be, for what ssetape must survive: an HTTP/1.1 server that
answers every request with the same head and chunks, written as they are given."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterable, Iterator


@contextlib.contextmanager
def fixed_upstream(status: bytes, chunks: Iterable[bytes]) -> Iterator[str]:
    """Serve ``status`` (status line and headers, chunked transfer) then ``chunks``, each one
    HTTP chunk, to every request; yields the server's URL."""
    body = list(chunks)
    server = socket.create_server(("127.0.0.1", 0))

    def serve(conn: socket.socket) -> None:
        with conn:
            request = b""
            while b"\r\n\r\n" not in request:
                got = conn.recv(65536)
                if not got:
                    return
                request += got
            # The whole request is read first: a socket closed with unread input is reset,
            # and a reset can reach the client before the end of the response does.
            head, _, body_read = request.partition(b"\r\n\r\n")
            length = next(
                (int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")[1:]
                 if line.lower().startswith(b"content-length:")),
                0,
            )  # fmt: skip
            while len(body_read) < length:
                got = conn.recv(65536)
                if not got:
                    return
                body_read += got
            try:
                conn.sendall(status.rstrip(b"\r\n") + b"\r\ntransfer-encoding: chunked\r\n\r\n")
                for data in body:
                    conn.sendall(b"%x\r\n%s\r\n" % (len(data), data))
                conn.sendall(b"0\r\n\r\n")
            except OSError:
                return

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        server.close()
