"""Replay without mitmproxy in the data path: what `ssetape replay` runs when nothing will be
forwarded (record mode `none`, or `once` with a tape).

Every chunk that mitmproxy relays costs its event loop tens of microseconds, so with a few
hundred timed streams a proxy in the path is what makes events late. When no request may go
upstream, this server matches and plays recordings itself: the same matching
(:class:`~ssetape.replay.request_index.RequestIndex`), the same miss answer and the same player
as the timed server behind the replayer addon. It serves reverse mode (the client's base URL
points here) and forward mode (HTTP_PROXY / HTTPS_PROXY point here: absolute-form requests,
and CONNECT tunnels it ends with TLS itself, with leaf certificates from the CA of
`ssetape ca`, speaking HTTP/1.1 or HTTP/2 as the client chooses). Record modes that forward,
and other proxy modes, keep using mitmproxy.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import asdict, replace
from functools import partial
from typing import Any
from urllib.parse import urlsplit

from ssetape.recording.log_format import LogLines, log_to
from ssetape.redactor import check_paths
from ssetape.replay.admission import SLOTS, Admission, share
from ssetape.replay.episodes import Episodes
from ssetape.replay.faults import Faults
from ssetape.replay.front_workers import FrontWorkers, WorkerSpec
from ssetape.replay.http_server import HttpServer, raise_fd_limit
from ssetape.replay.miss import Miss, MissKind
from ssetape.replay.player import Player
from ssetape.replay.request_index import RequestIndex
from ssetape.replay.responder import ResponseWriter, TlsFor, error_response
from ssetape.storage.store import Store
from ssetape.vocabulary import INLINE_BODY, Header, LogFormat

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
        tls: TlsFor | None = None,
        slots: int = SLOTS,
        episodes: Episodes | None = None,
    ) -> None:
        self.faults = faults
        # Recording new episodes: a miss is relayed to the recording proxy (see its module).
        self.episodes = episodes
        self.player = Player(
            store,
            allow_gaps=allow_gaps,
            on_incomplete=on_incomplete,
            faults=faults,
            on_miss=self.missed,
        )
        self.http = HttpServer(self.respond, tls=tls, admission=Admission(slots))
        self.index = index
        # Recordings made in reverse mode carry the upstream's host, not the Host header;
        # forward mode (no upstream) takes it from each request's absolute URL.
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
        out: ResponseWriter[Any],
        request_line: list[bytes],
        headers: dict[bytes, bytes],
        body: bytes,
        at: float,
    ) -> bool:
        t0 = at  # offset zero: the whole request is here
        if len(request_line) < 2:
            error_response(out, 400, "ssetape: malformed request line")
            return False
        host, t0 = self.origin(headers, t0)
        port = self.port
        method = request_line[0].decode("latin-1")
        target = request_line[1].decode("latin-1")
        if target[:1] != "/" and "://" in target:  # a forward proxy's request, or a tunnel's
            host, port, target = _absolute(target)
        # Before the lookup: a refused attempt leaves the recording for the client's retry.
        if self.faults and (refusal := self.faults.refusal(target)) is not None:
            out.send(refusal)
            return True
        request = (request_line, headers, body)
        return await self._answer(out, request, (method, host, target), port, t0)

    async def _answer(
        self,
        out: ResponseWriter[Any],
        request: tuple[list[bytes], dict[bytes, bytes], bytes],
        match: tuple[str, str, str],
        port: int | None,
        t0: float,
    ) -> bool:
        """Answer from the tape (a hit, or a miss's 404), or relay a miss (new_episodes)."""
        request_line, _, body = request
        method, host, target = match
        loop = asyncio.get_running_loop()
        try:
            # Known requests with small bodies are matched right here; anything that needs
            # the database or much hashing goes to a worker thread.
            found: int | Miss | str | None = (
                self.index.lookup(method, host, target, body or None, may_query=False, port=port)
                if len(body) <= INLINE_BODY
                else None
            )
            if found is None:
                find = partial(self._find, port=port, arrived=t0)
                found = await loop.run_in_executor(None, find, method, host, target, body or None)
        except Exception as e:
            log.exception("ssetape: replay lookup failed")
            error_response(out, 500, f"ssetape could not look this request up: {e}")
            return True
        if isinstance(found, int):
            self.hits += 1
            return await self.player.play_recording(out, request_line[0], found, t0, self.speed)
        if self.episodes is not None:
            if isinstance(found, Miss) and found.kind is MissKind.CUT:
                log.warning("ssetape: %s", found.message)  # recorded again: say so

            async def again(t: float) -> bool:  # a fault's refusal counted this request once
                return await self._answer(out, request, match, port, t)

            key = found if isinstance(found, str) else None
            return await self.episodes.answer(again, out, request, match, t0, key)
        assert isinstance(found, Miss)
        self.missed(found)
        error_response(out, 404, found.body(), "application/json", ((Header.MISS.raw, b"1"),))
        return True

    def missed(self, miss: Miss) -> None:
        """A request with no recording, or a session's client frame that differs from the
        recording's: told on the log and counted (the stop line's ``missed``)."""
        self.misses += 1
        log.warning("ssetape: %s", miss.message)

    def _find(
        self,
        method: str,
        host: str,
        target: str,
        body: bytes | None,
        *,
        port: int | None,
        arrived: float,
    ) -> int | Miss | str:
        """In a worker thread: the recording to play, or why there is none. Recording new
        episodes, a request with no recording at all is its match key alone: nobody reads
        a miss's nearest recordings there, and searching them would take the interpreter
        lock from the loop that times the streams beside it."""
        if self.episodes is not None:
            key = self.index.key(method, host, target, body)
            # Any refresh begun since the request came saw what was stored before it: the
            # misses of a burst share one read of the store.
            self.index.refresh(after=arrived)
            if not self.index.recordings(key):
                return key
        found = self.index.lookup(method, host, target, body, port=port)
        assert found is not None  # None only where it may not query
        return found

    async def serve(
        self,
        host: str,
        port: int,
        on_ready: Callable[[str, int], None],
        *,
        workers: tuple[FrontWorkers, WorkerSpec] | None = None,
        worker: bool = False,
    ) -> tuple[int, int, int]:
        """Serve until SIGINT/SIGTERM: (requests replayed, requests missed, misses relayed
        to be recorded), with those of ``workers`` started on the same port. ``worker``: this
        is one of them (it shares the port, stops when its standard input closes too, and
        leaves the summary to worker 0)."""
        bound = await self.http.start(host, port, reuse_port=worker or workers is not None)
        assert self.http.server is not None
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        if worker:
            threading.Thread(target=_stop_at_eof, args=(loop, stop), daemon=True).start()
        try:
            if workers is not None:
                pool, spec = workers
                await loop.run_in_executor(None, pool.start, replace(spec, port=bound))
            addr = self.http.server.sockets[0].getsockname()
            on_ready(addr[0], addr[1])
            await stop.wait()
        finally:
            await self.http.stop()
            if self.episodes is not None:
                self.episodes.relay.close()
            hits, misses = self.hits, self.misses
            relayed = self.episodes.recorded if self.episodes else 0
            misses += self.episodes.unreached if self.episodes else 0
            if workers is not None:
                more = await loop.run_in_executor(None, workers[0].stop)
                hits, misses, relayed = hits + more[0], misses + more[1], relayed + more[2]
            recorded = f", recorded {relayed}" if self.episodes else ""
            if (hits or misses or relayed) and not worker:
                log.info("ssetape: replayed %d, missed %d%s", hits, misses, recorded)
        return hits, misses, relayed


def _stop_at_eof(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    """A worker's parent went away when its standard input closes."""
    sys.stdin.buffer.read()
    with contextlib.suppress(RuntimeError):  # the loop already ended
        loop.call_soon_threadsafe(stop.set)


def _absolute(target: str) -> tuple[str, int, str]:
    """(host, port, origin-form target) of an absolute-form request target."""
    u = urlsplit(target)
    rest = target.split("://", 1)[1]
    path = rest[rest.find("/") :] if "/" in rest else "/"
    return u.hostname or "", u.port or (443 if u.scheme == "https" else 80), path


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
    confdir: str | None = None,
    workers: int = 1,
    worker: bool = False,
    slots: int | None = None,
    recorder: int | None = None,
    claims: str | None = None,
) -> tuple[int, int, int]:
    """Open the store and serve until SIGINT/SIGTERM (raises StoreError, ValueError,
    RuntimeError): (requests replayed, requests missed, misses relayed to be recorded).

    ``upstream`` empty: forward mode, HTTPS tunnels ended with the CA in ``confdir``.
    ``workers``: processes sharing the port (:mod:`ssetape.replay.front_workers`); ``slots``:
    TLS handshakes this process lets run at once (by default its share among ``workers``);
    ``recorder``: the port of the recording proxy misses are relayed to (new_episodes);
    ``claims``: the directory where workers claim the misses they record (made here by
    worker 0 when it starts others)."""
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(message)s", datefmt="%X")
    check_paths("--ignore-field", ignore)
    check_paths("--redact-field", redact_fields)
    store = Store.open(db, create=False)
    with contextlib.ExitStack() as stack:
        stack.callback(store.close)
        redactor = store.redactor(redact_headers, redact_fields)
        # Recording new episodes, a cut recording is recorded again rather than replayed.
        index = RequestIndex(store, redactor, ignore=ignore, match_host=match_host,
                             repeat=repeat, rerecord_cut=recorder is not None)  # fmt: skip
        if recorder is not None and workers > 1 and claims is None:
            claims = tempfile.mkdtemp(prefix="ssetape-claims-")
            stack.callback(shutil.rmtree, claims, ignore_errors=True)
        episodes = None
        if recorder is not None:
            episodes = Episodes(index, recorder, coalesce=repeat, claims=claims)
        tls: TlsFor | None = None
        if not upstream and confdir is not None:
            # Here only: certificates come from mitmproxy's CA store, which reverse-mode
            # replay (and the pytest plugin's) never needs.
            from ssetape.replay.leaf_certificates import LeafCertificates

            leaves = LeafCertificates(confdir)
            stack.callback(leaves.close)
            tls = leaves
        slots = share(workers) if slots is None else slots
        front = DirectFront(store, index, upstream, speed, allow_gaps=allow_gaps, faults=faults,
                            tls=tls, slots=slots, episodes=episodes)  # fmt: skip
        front.preload()
        raise_fd_limit()  # as the proxy does: a burst of replayed streams takes descriptors
        # What exists now (modules, the loaded tape) lives as long as the process: full
        # collections, which stall every timer while they run, skip it.
        gc.collect()
        gc.freeze()
        pool = None
        if workers > 1:
            spec = WorkerSpec(db, upstream, host, port, speed, ignore, match_host, repeat,
                              allow_gaps, redact_headers, redact_fields, confdir, slots,
                              recorder, claims, _log_lines())  # fmt: skip
            pool = (FrontWorkers(workers - 1), spec)
        return asyncio.run(front.serve(host, port, on_ready, workers=pool, worker=worker))


def _log_lines() -> list[str] | None:
    """How this process logs (`ssetape replay` set it up), for its workers to log alike."""
    for handler in logging.getLogger().handlers:
        if isinstance(lines := handler.formatter, LogLines):
            return [lines.name, lines.form.value]
    return None


def main() -> None:
    """A worker of ``ssetape replay --workers N`` (see :mod:`ssetape.replay.front_workers`)."""
    spec = asdict(WorkerSpec.from_line(sys.stdin.buffer.readline()))
    if (lines := spec.pop("log")) is not None:  # e.g. its "recording ... (a miss)" lines
        log_to(LogLines(lines[0], LogFormat(lines[1])))

    def ready(host: str, port: int) -> None:
        print("ready", flush=True)

    hits, misses, recorded = run_front(**spec, on_ready=ready, worker=True)
    print(f"counts {hits} {misses} {recorded}", flush=True)
    os._exit(0)  # nothing left to flush; the thread that watches stdin may still wait


if __name__ == "__main__":
    main()
