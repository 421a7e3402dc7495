"""Reverse-mode replay without mitmproxy in the data path: what `ssetape replay` runs when
nothing will be forwarded (record mode `none`, or `once` with a tape).

Every chunk that mitmproxy relays costs its event loop tens of microseconds, so with a few
hundred timed streams a proxy in the path is what makes events late. When the client talks
plain HTTP to ssetape (reverse mode) and no request may go upstream, this server matches and
plays recordings itself: same matching, same miss answer, same timing code as the timed
server behind the replayer addon. Forward mode, HTTPS interception and the record modes
that forward keep using mitmproxy.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Callable
from urllib.parse import urlsplit

from ssetape.replay.request_index import INLINE_BODY, ReplayIndex
from ssetape.replay.timed_server import TimedServer, error_response
from ssetape.storage.store import Store

log = logging.getLogger("ssetape.replay.direct_front")
PRELOAD = 256  # recordings loaded at start (the timed server's cache size)


class ReplayFront(TimedServer):
    def __init__(self, store: Store, index: ReplayIndex, upstream: str, speed: float) -> None:
        super().__init__(store, token="")
        self.index = index
        # Recordings made in reverse mode carry the upstream's host, not the Host header.
        self.host = urlsplit(upstream).hostname or ""
        self.speed = speed
        self.hits = 0
        self.misses = 0

    def origin(self, headers: dict[bytes, bytes], t0: float) -> tuple[str, float]:
        """The host to match on and offset zero of the request."""
        return self.host, t0

    async def respond(
        self,
        writer: asyncio.StreamWriter,
        request_line: list[bytes],
        headers: dict[bytes, bytes],
        body: bytes,
    ) -> bool:
        t0 = time.time()  # offset zero: the whole request is here
        if len(request_line) < 2:
            error_response(writer, 400, "ssetape: malformed request line")
            return False
        host, t0 = self.origin(headers, t0)
        method = request_line[0].decode("latin-1")
        target = request_line[1].decode("latin-1")
        loop = asyncio.get_running_loop()
        try:
            # Known requests with small bodies are matched right here; anything that needs
            # the database or much hashing goes to a worker thread.
            found = (
                self.index.lookup(method, host, target, body or None, may_query=False)
                if len(body) <= INLINE_BODY
                else None
            )
            if found is None:
                found = await loop.run_in_executor(
                    None, self.index.lookup, method, host, target, body or None
                )
        except Exception as e:
            log.exception("ssetape: replay lookup failed")
            error_response(writer, 500, f"ssetape could not look this request up: {e}")
            return True
        assert found is not None
        if isinstance(found, int):
            self.hits += 1
            return await self.play_recording(writer, request_line[0], found, t0, self.speed)
        self.misses += 1
        log.warning("ssetape: %s", found.message)
        error_response(writer, 404, found.body(), "application/json", b"x-ssetape-miss: 1\r\n")
        return True

    async def serve(self, host: str, port: int, on_ready: Callable[[str, int], None]) -> None:
        # A burst of a few hundred clients must not overflow the default backlog (100).
        server = await asyncio.start_server(self.handle, host, port, backlog=4096)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        addr = server.sockets[0].getsockname()
        on_ready(addr[0], addr[1])
        try:
            await stop.wait()
        finally:
            server.close()
            if self.hits or self.misses:
                log.info("ssetape: replayed %d, missed %d", self.hits, self.misses)


def run_front(
    db: str,
    upstream: str,
    *,
    host: str,
    port: int,
    speed: float,
    ignore: list[str],
    match_host: bool,
    repeat: bool,
    redact_headers: list[str],
    redact_fields: list[str],
    on_ready: Callable[[str, int], None],
) -> None:
    """Open the store and serve until SIGINT/SIGTERM (raises StoreError, OptionsError)."""
    from ssetape.addons.options import check_paths, redactor_for

    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(message)s", datefmt="%X")
    check_paths("--ignore-field", ignore)
    store = Store.open(db, create=False)
    try:
        redactor = redactor_for(store, redact_headers, redact_fields)
        index = ReplayIndex(store, redactor, ignore=ignore, match_host=match_host, repeat=repeat)
        front = ReplayFront(store, index, upstream, speed)
        # Load the tape before listening: the first burst of requests then pays nothing.
        index.refresh()
        for xid in index.recording_ids()[-PRELOAD:]:
            front.load(xid)
        asyncio.run(front.serve(host, port, on_ready))
    finally:
        store.close()
