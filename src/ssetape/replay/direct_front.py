"""Reverse-mode replay without mitmproxy in the data path: what `ssetape replay` runs when
nothing will be forwarded (record mode `none`, or `once` with a tape).

Every chunk that mitmproxy relays costs its event loop tens of microseconds, so with a few
hundred timed streams a proxy in the path is what makes events late. When the client talks
plain HTTP to ssetape (reverse mode) and no request may go upstream, this server matches and
plays recordings itself: the same matching (:class:`~ssetape.replay.request_index.RequestIndex`),
the same miss answer and the same player as the timed server behind the replayer addon.
Forward mode, HTTPS interception and the record modes that forward keep using mitmproxy.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import time
from collections.abc import Callable
from functools import partial
from urllib.parse import urlsplit

from ssetape.redactor import check_paths
from ssetape.replay.faults import Faults
from ssetape.replay.http_server import HttpServer, error_response, raise_fd_limit
from ssetape.replay.player import Player
from ssetape.replay.request_index import RequestIndex
from ssetape.storage.store import Store
from ssetape.vocabulary import INLINE_BODY, Header

__all__ = ["PRELOAD", "DirectFront", "run_front"]

log = logging.getLogger("ssetape.replay")
PRELOAD = 256  # recordings loaded at start, at most (the player's cache bounds their bytes)


class DirectFront:
    def __init__(
        self,
        store: Store,
        index: RequestIndex,
        upstream: str,
        speed: float,
        *,
        allow_gaps: bool = False,
        on_incomplete: Callable[[int, str], object] | None = None,
        faults: Faults | None = None,
    ) -> None:
        self.faults = faults
        self.player = Player(
            store, allow_gaps=allow_gaps, on_incomplete=on_incomplete, faults=faults
        )
        self.http = HttpServer(self.respond)
        self.index = index
        # Recordings made in reverse mode carry the upstream's host, not the Host header.
        self.host = urlsplit(upstream).hostname or ""
        self.port = urlsplit(upstream).port  # shown in a miss's message
        self.speed = speed
        self.hits = 0
        self.misses = 0

    def preload(self) -> None:
        """Load the newest recordings before listening: the first burst then pays nothing."""
        self.index.refresh()
        self.player.preload(self.index.recording_ids()[-PRELOAD:])

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
        t0 = time.monotonic()  # offset zero: the whole request is here
        if len(request_line) < 2:
            error_response(writer, 400, "ssetape: malformed request line")
            return False
        host, t0 = self.origin(headers, t0)
        method = request_line[0].decode("latin-1")
        target = request_line[1].decode("latin-1")
        # Before the lookup: a refused attempt leaves the recording for the client's retry.
        if self.faults and (refusal := self.faults.refusal(target)) is not None:
            writer.write(refusal)
            return True
        loop = asyncio.get_running_loop()
        try:
            # Known requests with small bodies are matched right here; anything that needs
            # the database or much hashing goes to a worker thread.
            found = (
                self.index.lookup(
                    method, host, target, body or None, may_query=False, port=self.port
                )
                if len(body) <= INLINE_BODY
                else None
            )
            if found is None:
                lookup = partial(self.index.lookup, port=self.port)
                found = await loop.run_in_executor(None, lookup, method, host, target, body or None)
        except Exception as e:
            log.exception("ssetape: replay lookup failed")
            error_response(writer, 500, f"ssetape could not look this request up: {e}")
            return True
        assert found is not None
        if isinstance(found, int):
            self.hits += 1
            return await self.player.play_recording(writer, request_line[0], found, t0, self.speed)
        self.misses += 1
        log.warning("ssetape: %s", found.message)
        miss = f"{Header.MISS}: 1\r\n".encode()
        error_response(writer, 404, found.body(), "application/json", miss)
        return True

    async def serve(self, host: str, port: int, on_ready: Callable[[str, int], None]) -> None:
        await self.http.start(host, port)
        assert self.http.server is not None
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        addr = self.http.server.sockets[0].getsockname()
        on_ready(addr[0], addr[1])
        try:
            await stop.wait()
        finally:
            await self.http.stop()
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
    allow_gaps: bool,
    redact_headers: list[str],
    redact_fields: list[str],
    on_ready: Callable[[str, int], None],
    faults: Faults | None = None,
) -> None:
    """Open the store and serve until SIGINT/SIGTERM (raises StoreError, ValueError)."""
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(message)s", datefmt="%X")
    check_paths("--ignore-field", ignore)
    check_paths("--redact-field", redact_fields)
    store = Store.open(db, create=False)
    try:
        redactor = store.redactor(redact_headers, redact_fields)
        index = RequestIndex(store, redactor, ignore=ignore, match_host=match_host, repeat=repeat)
        front = DirectFront(store, index, upstream, speed, allow_gaps=allow_gaps, faults=faults)
        front.preload()
        raise_fd_limit()  # as the proxy does: a burst of replayed streams takes descriptors
        # What exists now (modules, the loaded tape) lives as long as the process: full
        # collections, which stall every timer while they run, skip it.
        gc.collect()
        gc.freeze()
        asyncio.run(front.serve(host, port, on_ready))
    finally:
        store.close()
