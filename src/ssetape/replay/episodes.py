"""New episodes beside a timed replay: what `ssetape replay --record-mode new_episodes` runs.

The direct replay server (:mod:`ssetape.replay.direct_front`) fronts every connection and
answers every request the tape holds itself, on its own timers. Only a miss leaves it: it is
relayed over loopback to an internal recording proxy (`ssetape record`, mitmproxy with the
recorder, in a child process: its event loop and interpreter lock are not the replay's),
which forwards it upstream and stores it in the same store. The relay
(:mod:`ssetape.replay.relay`) streams the live response back as it arrives. Once the
recorder has stored it, the server's request index learns it, and the next identical
request is a hit.

Identical misses (the same match key) that arrive while one is being recorded are not
forwarded: they wait until its recording is stored and are then replayed from it, each with
the recorded timing from the moment it was stored. The upstream is asked once, as a tape
that already held the recording would have answered them. If the recording cannot be
replayed (the upstream failed), the next of them is forwarded and recorded in turn. With
``--no-repeat`` each request is its own episode (a recording is served once): nothing waits,
each miss is recorded. With ``--workers N`` every worker relays to the one recording proxy,
and a worker records a miss only while it holds the key's claim (:class:`Claims`, a lock
file the workers share): identical misses in other workers wait for that recording too.
See docs/REPLAY.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from ssetape.replay.relay import UNREACHED, Relay, Relayed
from ssetape.replay.request_index import RequestIndex
from ssetape.replay.responder import ResponseWriter
from ssetape.replay.ws_relay import relay_session
from ssetape.replay.ws_session import WsUpgrade
from ssetape.vocabulary import INLINE_BODY

__all__ = ["Claims", "Episodes", "RecordingChild", "recording_args"]

log = logging.getLogger("ssetape.replay")

JOIN_TIMEOUT = 10.0  # seconds the recorder may take to store a relayed miss
JOIN_POLL = 0.025  # seconds between looks at the store for misses being stored (one look for all)
CLAIM_POLL = 0.01  # seconds between a worker's looks at a key another worker records
JOINED_KEPT = 4096  # keys whose join time is kept (see Episodes.answer)
START_TIMEOUT = 60.0
STOP_TIMEOUT = 40.0  # the recorder drains what is in flight first
SSETAPE = [sys.executable, "-c", "from ssetape.cli.main import main; main(prog_name='ssetape')"]


class RecordingChild:
    """The internal recording proxy: `ssetape record` on a loopback port, started and
    stopped by `ssetape replay`. Its output reaches ours, but for its "listening on" line
    (scripts and the pytest plugin wait for ours)."""

    def __init__(self, args: list[str]) -> None:
        self.args = args
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self._pump: threading.Thread | None = None

    def start(self) -> int:
        """Start it and wait until it listens: its port (RuntimeError if it cannot)."""
        linux = sys.platform.startswith("linux")
        self.proc = subprocess.Popen(
            [*SSETAPE, "record", *self.args, "--host", "127.0.0.1", "--port", "0"],
            stdout=subprocess.PIPE,
            # Its own session: a Ctrl-C at the terminal reaches us alone, and we stop it with
            # one SIGTERM (a second signal would stop its drain at once). It dies with us.
            start_new_session=True,
            preexec_fn=_die_with_parent if linux else None,
        )
        ready = threading.Event()
        self._pump = threading.Thread(target=self._lines, args=(ready,), daemon=True)
        self._pump.start()
        if not ready.wait(START_TIMEOUT) or not self.port:
            self.stop()
            raise RuntimeError("the recording proxy of new_episodes did not start")
        return self.port

    def _lines(self, ready: threading.Event) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            if not self.port and b"listening on http://" in line:
                self.port = urlsplit(line.split(b"listening on ", 1)[1].split()[0]).port or 0
                ready.set()
                continue
            if b"listening on" in line:
                continue  # its admin's, if a --set asked for one
            sys.stdout.buffer.write(line)
            sys.stdout.flush()
        ready.set()

    def stop(self) -> None:
        """SIGTERM (it stores what is in flight), and wait."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self._pump is not None:
            self._pump.join(5)


def recording_args(common: dict[str, Any]) -> list[str]:
    """`ssetape record`'s arguments for the recording proxy of new_episodes: what the user
    gave replay about storing (it listens on a loopback port of its own)."""
    args = ["--db", common["db"], "--mode", common["mode"], "--confdir", common["confdir"],
            "--log-format", common["log_format"]]  # fmt: skip
    for flag, key in (("--redact-header", "redact_header"), ("--redact-field", "redact_field")):
        for value in common[key]:
            args += [flag, value]
    for host, profile in common["profiles"].items():
        args += ["--profile", f"{host}={profile}"]
    for flag, key in (("--session", "session"), ("--price-data", "price_data"),
                      ("--name", "name")):  # fmt: skip
        if common[key]:
            args += [flag, common[key]]
    for option in common["sets"]:
        args += ["--set", option]
    return args


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Claims:
    """Which worker of ``ssetape replay --workers N`` records a miss: one lock file per match
    key in a directory they share, taken with ``flock`` (the kernel gives it back if its
    holder dies). Within a process, identical misses already wait for one of them, so each
    process asks for a key once at a time."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    async def take(self, key: str) -> int:
        """Wait until no other process records ``key``: a descriptor to :meth:`give_back`."""
        fd = os.open(os.path.join(self.directory, key), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return fd
                except BlockingIOError:
                    # Held for a whole live stream: a few checks a second cost nothing.
                    await asyncio.sleep(CLAIM_POLL)
        except BaseException:
            os.close(fd)
            raise

    @staticmethod
    def give_back(fd: int) -> None:
        os.close(fd)  # and with it the lock


class Episodes:
    """Misses of a replay that records new episodes: each relayed once, the identical ones
    that arrive meanwhile held until its recording joins the tape (in this process, and with
    ``claims`` in every worker that shares them)."""

    def __init__(
        self, index: RequestIndex, port: int, *, coalesce: bool = True, claims: str | None = None
    ) -> None:
        self.index = index
        self.relay = Relay(port)  # to the recording proxy, on kept connections
        self.coalesce = coalesce
        self.claims = Claims(claims) if claims and coalesce else None
        self.recorded = 0  # misses the recording proxy answered (so the recorder stores them)
        self.unreached = 0  # misses the recording proxy never had (counted as missed)
        self._pending: dict[str, asyncio.Future[None]] = {}
        self._joined: dict[str, float] = {}  # key -> when its last recording joined the tape
        self._waiting: dict[str, tuple[int, float, asyncio.Future[None]]] = {}
        self._poller: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def answer(
        self,
        again: Callable[[float], Awaitable[bool]],
        out: ResponseWriter[Any],
        request: tuple[list[bytes], dict[bytes, bytes], bytes],
        match: tuple[str, str, str],
        at: float,
        key: str | None = None,
    ) -> bool:
        """Answer a miss that arrived at ``at``: relay it, or wait for the identical one
        being recorded and then answer as the tape does (``again``: the front's answer,
        with offset zero given; ``key``: the request's match key, if known)."""
        request_line, headers, body = request
        method, host, target = match
        what = f"{method} {host}{target}"
        upgrade = getattr(out, "upgrade", None)
        if isinstance(upgrade, WsUpgrade):  # a session: each is its own (see ws_relay)
            log.info("ssetape: recording %s (a WebSocket session that missed)", what)
            relayed = await relay_session(self.relay.port, out, upgrade, request_line, headers)
            return self._count(relayed)
        if not self.coalesce:
            log.info("ssetape: recording %s (a miss)", what)
            return self._count(await self.relay.send(out, request_line, headers, body))
        loop = asyncio.get_running_loop()
        if key is None:
            args = (method, host, target, body or None)
            # As a lookup: a small body is hashed right here, a big one in a thread.
            big = len(body) > INLINE_BODY
            key = (
                await loop.run_in_executor(None, self.index.key, *args)
                if big
                else self.index.key(*args)
            )
        if self._joined.get(key, -1.0) >= at:
            # Its lookup ran before a recording of it joined: that one answers it now.
            return await again(time.monotonic())
        if (pending := self._pending.get(key)) is not None:
            await asyncio.shield(pending)
            return await again(time.monotonic())  # replayed from it now (or its turn comes)
        done: asyncio.Future[None] = loop.create_future()
        self._pending[key] = done
        had = self.index.recordings(key)
        claim = None
        try:
            if self.claims is not None:
                claim = await self.claims.take(key)
                # Another worker may have stored it since this request missed.
                await loop.run_in_executor(None, self.index.refresh)
                if self.index.recordings(key) > had:
                    self.claims.give_back(claim)
                    claim = None
                    self._release(key, done)
                    return await again(time.monotonic())
        except BaseException:
            if claim is not None:
                Claims.give_back(claim)
            self._release(key, done)
            raise
        log.info("ssetape: recording %s (a miss)", what)
        relayed = UNREACHED  # if cancelled before the proxy answered: nothing to wait for
        try:
            relayed = await self.relay.send(out, request_line, headers, body)
            return self._count(relayed)
        finally:
            if relayed.reached:
                # Held until the recorder stored it (the next identical request is then a
                # hit), but not by this connection: its next request may be another.
                task = loop.create_task(self._settle(key, had, done, claim))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            else:
                # The recording proxy never had it (down, or closed first): no recording is
                # coming, and the identical misses waiting are relayed in turn at once
                # rather than after JOIN_TIMEOUT.
                if claim is not None:
                    Claims.give_back(claim)
                self._release(key, done)

    def _count(self, relayed: Relayed) -> bool:
        """Counted as recorded when the recording proxy had it (the stop line's figure)."""
        if relayed.reached:
            self.recorded += 1
        else:  # answered by our 502, which says why: a miss neither replayed nor recorded
            self.unreached += 1
            log.warning("ssetape: a miss was not recorded: the recording proxy did not take it")
        return relayed.going_on

    def _release(self, key: str, done: asyncio.Future[None]) -> None:
        if self._pending.get(key) is done:
            del self._pending[key]
        if not done.done():
            done.set_result(None)

    async def _settle(
        self, key: str, had: int, done: asyncio.Future[None], claim: int | None
    ) -> None:
        try:
            if await self._stored(key, had):
                if len(self._joined) >= JOINED_KEPT:
                    self._joined.clear()  # only requests in flight at a join need it
                self._joined[key] = time.monotonic()
        finally:
            if claim is not None:
                Claims.give_back(claim)
            self._release(key, done)

    async def _stored(self, key: str, had: int) -> bool:
        """Wait until the index holds a new recording of ``key`` (JOIN_TIMEOUT at most)."""
        joined: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting[key] = (had, time.monotonic() + JOIN_TIMEOUT, joined)
        if self._poller is None or self._poller.done():
            self._poller = asyncio.get_running_loop().create_task(self._poll())
        try:
            await joined
            return True
        except TimeoutError:
            log.warning("ssetape: a recorded miss was not stored within %gs", JOIN_TIMEOUT)
            return False
        finally:
            self._waiting.pop(key, None)

    async def _poll(self) -> None:
        """One refresh of the index at a time for every miss being stored (a burst of
        distinct misses would otherwise read the store once each, every poll)."""
        loop = asyncio.get_running_loop()
        while self._waiting:
            await asyncio.sleep(JOIN_POLL)
            await loop.run_in_executor(None, self.index.refresh)
            now = time.monotonic()
            for key, (had, deadline, joined) in list(self._waiting.items()):
                if joined.done():
                    continue
                if self.index.recordings(key) > had:
                    joined.set_result(None)
                elif now > deadline:
                    joined.set_exception(TimeoutError())
