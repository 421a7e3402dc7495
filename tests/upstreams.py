"""Upstreams no real API would be, for what ssetape must survive: an HTTP/1.1 server that
answers every request with the same head and chunks, written as they are given; and the
accept loop and request reading that the test upstreams share."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterable, Iterator


def read_request(conn: socket.socket, buffered: bytes) -> tuple[dict[str, str], bytes] | None:
    """The next request on ``conn`` (after ``buffered``, what was read past the previous
    one): its header fields, lower-cased, and what was read past its body. None once the
    client is gone. The whole body is read: a socket closed with unread input is reset, and
    a reset can reach the client before the end of the response does."""
    while b"\r\n\r\n" not in buffered:
        got = conn.recv(65536)
        if not got:
            return None
        buffered += got
    head, _, buffered = buffered.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")[1:]
    fields = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines)}
    length = int(fields.get("content-length", "0"))
    while len(buffered) < length:
        got = conn.recv(65536)
        if not got:
            return None
        buffered += got
    return fields, buffered[length:]


@contextlib.contextmanager
def serving(serve: Callable[[socket.socket], None]) -> Iterator[str]:
    """Run ``serve`` on a thread for every connection to a fresh loopback port; yields the
    server's URL."""
    server = socket.create_server(("127.0.0.1", 0))

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


@contextlib.contextmanager
def fixed_upstream(status: bytes, chunks: Iterable[bytes]) -> Iterator[str]:
    """Serve ``status`` (status line and headers, chunked transfer) then ``chunks``, each one
    HTTP chunk, to every request; yields the server's URL."""
    body = list(chunks)

    def serve(conn: socket.socket) -> None:
        with conn:
            if read_request(conn, b"") is None:
                return
            try:
                conn.sendall(status.rstrip(b"\r\n") + b"\r\ntransfer-encoding: chunked\r\n\r\n")
                for data in body:
                    conn.sendall(b"%x\r\n%s\r\n" % (len(data), data))
                conn.sendall(b"0\r\n\r\n")
            except OSError:
                return

    with serving(serve) as url:
        yield url
