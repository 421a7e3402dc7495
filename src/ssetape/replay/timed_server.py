"""The timed source of replayed responses: a small HTTP/1.1 server in its own process.

mitmproxy cannot stream a response that an addon makes up, so the replayer re-targets a
matched flow to this server, which writes the recorded status, headers and body bytes at their
recorded offsets. It runs in a separate process so that its timers never wait for the proxy's
event loop or its GIL: only the proxy's relay of each chunk adds latency.

The proxy passes, in request headers, the exchange id, the moment the proxy had the whole
request (``time.time()``, offset zero) and the speed. Each exchange's events are loaded with one
query and kept pre-encoded in a small cache.

Run as ``python -m ssetape.replay.timed_server --db URL`` (or with ``$SSETAPE_DB``); it prints
``port N`` once listening and exits when its standard input closes (the proxy went away).
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import logging
import os
import sys
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

from sqlalchemy import select

from ssetape.storage.models import Chunk, Event, Exchange
from ssetape.storage.store import Store, StoreError

log = logging.getLogger("ssetape.replay.timed_server")

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "transfer-encoding",
        "content-length",
        "proxy-connection",
        "te",
        "trailer",
        "upgrade",
    }
)
H_EXCHANGE, H_T0, H_SPEED = b"x-ssetape-exchange", b"x-ssetape-t0", b"x-ssetape-speed"
H_TOKEN = b"x-ssetape-token"


@dataclass(frozen=True, slots=True)
class Script:
    """One recorded response, ready to write: head bytes and (offset seconds, bytes) pieces."""

    head: bytes
    ttfb: float
    pieces: tuple[tuple[float, bytes], ...]
    stream: bool
    complete: bool  # False: cut the connection after the last piece, as the recording ended
    status: int
    head_no_body: bytes  # for HEAD and bodiless statuses: the recorded headers, no framing


def build_script(x: Exchange, events: list[Event], chunks: list[Chunk]) -> Script:
    stream = x.is_stream
    headers = [(k, v) for k, v in (x.response_headers or []) if k.lower() not in HOP_BY_HOP]
    pieces: list[tuple[float, bytes]] = []
    if stream:
        # Encoded streams replay their wire chunks, plain ones their events; events that
        # arrived in one read stay one write, as they came.
        rows = (
            [(c.offset_us, c.data) for c in chunks]
            if chunks
            else [(e.offset_us, e.raw) for e in events]
        )
        for off, data in rows:
            if pieces and pieces[-1][0] == off / 1e6:
                pieces[-1] = (pieces[-1][0], pieces[-1][1] + data)
            else:
                pieces.append((off / 1e6, data))
        # Framed once here, not per replay.
        pieces = [(off, b"%x\r\n%s\r\n" % (len(data), data)) for off, data in pieces if data]
        headers.append(("transfer-encoding", "chunked"))
    else:
        body = x.response_body or b""
        pieces.append(((x.duration_us or x.ttfb_us or 0) / 1e6, body))
        headers.append(("content-length", str(len(body))))
    status = x.status or 502
    first = f"HTTP/1.1 {status} {x.reason or ''}".rstrip()
    recorded = [(k, v) for k, v in (x.response_headers or []) if k.lower() not in HOP_BY_HOP
                or k.lower() == "content-length"]  # fmt: skip
    return Script(
        status=status,
        head_no_body=_head(first, recorded),
        head=_head(first, headers),
        ttfb=(x.ttfb_us or 0) / 1e6,
        pieces=tuple(pieces),
        stream=stream,
        complete=x.state == "completed",
    )


def _head(first: str, headers: list[tuple[str, str]]) -> bytes:
    lines = [first, *(f"{k}: {v}" for k, v in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "surrogateescape")


class TimedServer:
    def __init__(self, store: Store, token: str, *, cache_size: int = 256) -> None:
        self.store = store
        self.token = token.encode()
        self._cache: OrderedDict[int, Script] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()  # loads run in executor threads

    def load(self, exchange_id: int) -> Script:
        with self._lock:
            return self._load(exchange_id)

    def _load(self, exchange_id: int) -> Script:
        script = self._cache.get(exchange_id)
        if script is None:
            with self.store.Session() as s:
                x = s.get(Exchange, exchange_id)
                if x is None or x.status is None:
                    raise LookupError(f"exchange {exchange_id} has no recorded response")
                events = list(
                    s.scalars(
                        select(Event).where(Event.exchange_id == exchange_id).order_by(Event.seq)
                    )
                )
                chunks = list(
                    s.scalars(
                        select(Chunk).where(Chunk.exchange_id == exchange_id).order_by(Chunk.seq)
                    )
                )
                script = build_script(x, events, chunks)
            self._cache[exchange_id] = script
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        self._cache.move_to_end(exchange_id)
        return script

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                request_line, headers = _parse_head(head)
                body = await read_body(reader, headers)
                keep = await self.respond(writer, request_line, headers, body)
                if not keep or headers.get(b"connection", b"").lower() == b"close":
                    await writer.drain()
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def respond(
        self,
        writer: asyncio.StreamWriter,
        request_line: list[bytes],
        headers: dict[bytes, bytes],
        body: bytes,
    ) -> bool:
        """Serve one request re-targeted by the proxy; False to close the connection."""
        if not hmac.compare_digest(headers.get(H_TOKEN, b""), self.token):
            error_response(writer, 403, "ssetape timed server: not the proxy's request")
            return True
        try:
            xid = int(headers[H_EXCHANGE])
            t0 = float(headers[H_T0])
            speed = float(headers.get(H_SPEED, b"1"))
        except (KeyError, ValueError) as e:
            error_response(writer, 500, f"ssetape timed server: bad replay request: {e}")
            return True
        return await self.play_recording(writer, request_line[0], xid, t0, speed)

    async def play_recording(
        self, writer: asyncio.StreamWriter, method: bytes, xid: int, t0: float, speed: float
    ) -> bool:
        loop = asyncio.get_running_loop()
        try:
            # A cached script needs no thread hop (a plain dict read is atomic).
            script = self._cache.get(xid)
            if script is None:
                script = await loop.run_in_executor(None, self.load, xid)
        except LookupError as e:
            error_response(writer, 500, f"ssetape timed server: {e}")
            return True
        except Exception as e:  # the store failed: say so, keep serving
            log.exception("ssetape timed server: cannot load a recording")
            error_response(writer, 503, f"ssetape: cannot read the recording: {e}")
            return True
        return await self.play(writer, method, script, t0, speed)

    async def play(
        self, writer: asyncio.StreamWriter, method: bytes, script: Script, t0: float, speed: float
    ) -> bool:
        """Write ``script`` with its recorded timing from ``t0`` (a ``time.time()`` value)."""
        loop = asyncio.get_running_loop()
        # Deadlines are absolute (loop clock), so late wake-ups never add up.
        base = loop.time() - (time.time() - t0)

        async def at(offset: float) -> None:
            if speed > 0:
                delay = base + offset / speed - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)

        await at(script.ttfb)
        if method == b"HEAD" or script.status in (204, 304) or script.status < 200:
            writer.write(script.head_no_body)
            await writer.drain()
            return True
        if not script.stream:
            await at(script.pieces[0][0])
            if not script.complete:  # the body never fully arrived when recording
                writer.write(script.head)
                writer.transport.abort()
                return False
            writer.write(script.head + script.pieces[0][1])
            await writer.drain()
            return True
        return await self._play_stream(writer.transport, script, base, speed)

    async def _play_stream(
        self, transport: asyncio.BaseTransport, script: Script, base: float, speed: float
    ) -> bool:
        """Every write is a timer callback at its absolute deadline: no coroutine per event,
        nothing that can drift; writes due at the same moment go out as one."""
        assert isinstance(transport, asyncio.WriteTransport)
        loop = asyncio.get_running_loop()
        plan: list[tuple[float, bytes]] = []
        for offset, data in ((script.ttfb, script.head), *script.pieces):
            when = base + offset / speed if speed > 0 else 0.0
            if plan and when <= plan[-1][0]:  # the heap does not keep equal deadlines in order
                plan[-1] = (plan[-1][0], plan[-1][1] + data)
            else:
                plan.append((when, data))
        tail = b"0\r\n\r\n" if script.complete else b""
        done: asyncio.Future[bool] = loop.create_future()
        handles: list[asyncio.TimerHandle] = []

        def emit(data: bytes, last: bool) -> None:
            if transport.is_closing():  # the client left: stop writing to it
                for h in handles:
                    h.cancel()
                if not done.done():
                    done.set_result(False)
                return
            transport.write(data + tail if last else data)
            if last:
                if not script.complete:
                    transport.abort()  # the recording ended here: end the replay the same way
                done.set_result(script.complete)

        if speed > 0:
            handles += [
                loop.call_at(when, emit, data, i == len(plan) - 1)
                for i, (when, data) in enumerate(plan)
            ]
        else:
            emit(b"".join(data for _, data in plan), True)
        try:
            return await done
        finally:
            for h in handles:
                h.cancel()


def error_response(
    writer: asyncio.StreamWriter,
    status: int,
    body: str | bytes,
    content_type: str = "text/plain",
    extra: bytes = b"",
) -> None:
    data = body.encode() if isinstance(body, str) else body
    writer.write(
        b"HTTP/1.1 %d Error\r\ncontent-type: %s\r\ncontent-length: %d\r\n%s\r\n%s"
        % (status, content_type.encode(), len(data), extra, data)
    )


def _parse_head(head: bytes) -> tuple[list[bytes], dict[bytes, bytes]]:
    """(request line split in words, lower-cased header names -> values)."""
    lines = head.split(b"\r\n")
    out: dict[bytes, bytes] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if sep:
            out[name.strip().lower()] = value.strip()
    return lines[0].split(b" "), out


async def read_body(reader: asyncio.StreamReader, headers: dict[bytes, bytes]) -> bytes:
    if b"chunked" in headers.get(b"transfer-encoding", b"").lower():
        parts = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            parts.append((await reader.readexactly(size + 2))[:-2])
            if size == 0:  # no trailers: its CRLF was read with it
                return b"".join(parts)
    n = int(headers.get(b"content-length", b"0") or 0)
    return await reader.readexactly(n) if n else b""


async def serve(db: str, host: str, port: int) -> None:
    try:
        store = Store.open(db, create=False)
    except StoreError as e:
        print(f"error {e}", flush=True)
        return
    server = TimedServer(store, os.environ.get("SSETAPE_REPLAY_TOKEN", ""))
    srv = await asyncio.start_server(server.handle, host, port, backlog=4096)
    print(f"port {srv.sockets[0].getsockname()[1]}", flush=True)
    loop = asyncio.get_running_loop()
    # Exit with the parent: its end of our stdin closes when it goes away.
    await loop.run_in_executor(None, sys.stdin.buffer.read)
    srv.close()
    store.close()


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m ssetape.replay.timed_server")
    ap.add_argument(
        "--db", default=os.environ.get("SSETAPE_DB"), required="SSETAPE_DB" not in os.environ
    )
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args()
    asyncio.run(serve(args.db, args.host, args.port))


if __name__ == "__main__":
    main()
