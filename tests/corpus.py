"""The real provider streams of ``tests/data/real_streams`` and an upstream serving them.

Each stream is served as its provider sent it: the recorded status and headers, the body in
pieces of one frame each (an SSE event, an NDJSON line, an AWS event-stream frame; its wire
bytes when gzip-encoded, in pieces of 256 bytes), a few milliseconds apart so that recording
and replay have timing to keep.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from ssetape.framing.framings import FRAMINGS, Framing, ParsedFrame, framing_of
from tests.upstreams import read_request, serving

CORPUS = Path(__file__).parent / "data" / "real_streams"
PICK = "x-corpus-stream"  # the request header naming the stream to serve
PAUSE = 0.002  # seconds between pieces


@dataclass(frozen=True)
class RealStream:
    name: str
    meta: dict[str, Any]
    wire: bytes  # as served (gzip bytes for the gzip ones)

    @property
    def host(self) -> str:
        return str(self.meta["original_host"])

    @property
    def encoding(self) -> str:
        return str(self.meta["response_headers"].get("content-encoding", ""))

    @property
    def body(self) -> bytes:
        """The decoded body: what a client reads."""
        return gzip.decompress(self.wire) if self.encoding == "gzip" else self.wire

    @property
    def request_body(self) -> bytes:
        return str(self.meta.get("request_body") or "").encode()

    @property
    def framing(self) -> Framing:
        return framing_of(self.meta["response_headers"].get("content-type"))

    def frames(self) -> list[ParsedFrame]:
        """The decoded body's frames, as the recorder cuts them."""
        parser = FRAMINGS[self.framing].parser(1 << 30)
        return [*parser.feed(self.body), *parser.close()]

    def pieces(self) -> list[bytes]:
        if self.encoding:
            return [self.wire[i : i + 256] for i in range(0, len(self.wire), 256)]
        return [frame.raw for frame in self.frames()]


@cache
def real_streams() -> tuple[RealStream, ...]:
    found = []
    for meta_file in sorted(CORPUS.glob("*.json")):
        meta = json.loads(meta_file.read_text())
        body = CORPUS / meta.get("body_file", f"{meta['name']}.sse")
        found.append(RealStream(meta["name"], meta, body.read_bytes()))
    return tuple(found)


def by_name(name: str) -> RealStream:
    return next(s for s in real_streams() if s.name == name)


def answer(conn: socket.socket, stream: RealStream) -> bool:
    headers = "".join(f"{k}: {v}\r\n" for k, v in stream.meta["response_headers"].items())
    status = stream.meta["response_status"]
    try:
        conn.sendall(
            f"HTTP/1.1 {status} OK\r\n{headers}transfer-encoding: chunked\r\n\r\n".encode()
        )
        for piece in stream.pieces():
            conn.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
            time.sleep(PAUSE)
        conn.sendall(b"0\r\n\r\n")
    except OSError:
        return False
    return True


@contextlib.contextmanager
def corpus_upstream() -> Iterator[str]:
    """An HTTP/1.1 upstream answering each request with the stream its ``PICK`` header names
    (chunked, piece by piece); yields its URL."""

    def serve(conn: socket.socket) -> None:
        # Keep-alive, as the providers do: the proxy reuses its upstream connections.
        buffered = b""
        with conn:
            while (request := read_request(conn, buffered)) is not None:
                fields, buffered = request
                if not answer(conn, by_name(fields.get(PICK, ""))):
                    return

    with serving(serve) as url:
        yield url
