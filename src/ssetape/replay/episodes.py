"""New episodes beside a timed replay: what `ssetape replay --record-mode new_episodes` runs.

The direct replay server (:mod:`ssetape.replay.direct_front`) fronts every connection and
answers every request the tape holds itself, on its own timers. Only a miss leaves it: it is
relayed over loopback to an internal recording proxy (`ssetape record`, mitmproxy with the
recorder, in a child process: its event loop and interpreter lock are not the replay's),
which forwards it upstream and stores it in the same store. The relay streams the live
response back as it arrives. Once the recorder has stored it, the server's request index
learns it, and the next identical request is a hit.

Identical misses (the same match key) that arrive while one is being recorded are not
forwarded: they wait until its recording is stored and are then replayed from it, each with
the recorded timing from the moment it was stored. The upstream is asked once, as a tape
that already held the recording would have answered them. If the recording cannot be
replayed (the upstream failed), the next of them is forwarded and recorded in turn. With
``--no-repeat`` each request is its own episode (a recording is served once): nothing waits,
each miss is recorded. See docs/REPLAY.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import h11

from ssetape.replay.request_index import RequestIndex
from ssetape.replay.responder import ResponseWriter, error_response
from ssetape.replay.response_parts import END, Body, Head

__all__ = ["Episodes", "RecordingChild", "recording_args", "relay"]

log = logging.getLogger("ssetape.replay")

JOIN_TIMEOUT = 10.0  # seconds the recorder may take to store a relayed miss
JOIN_POLL = 0.01
START_TIMEOUT = 60.0
STOP_TIMEOUT = 40.0  # the recorder drains what is in flight first
READ = 1 << 16
# Not relayed: they describe one hop (ours to the recording proxy sets its own).
HOP = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding",
                 b"te", b"upgrade", b"content-length", b"trailer"})  # fmt: skip
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


async def relay(
    port: int,
    out: ResponseWriter[Any],
    request_line: list[bytes],
    headers: dict[bytes, bytes],
    body: bytes,
) -> bool:
    """Send the request to the recording proxy on ``port`` and stream its answer to ``out``
    as it arrives: False once the answer was cut (the client's connection cannot go on)."""
    target = request_line[1] if len(request_line) > 1 else b"/"
    fields = [(k, v) for k, v in headers.items() if k not in HOP]
    if b"host" not in headers:
        fields.append((b"host", urlsplit(target).netloc or b"localhost"))
    fields.append((b"content-length", b"%d" % len(body)))
    conn = h11.Connection(h11.CLIENT)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError as e:
        error_response(out, 502, f"ssetape: the recording proxy cannot be reached: {e}")
        return True
    headed = False
    try:
        head = h11.Request(method=request_line[0], target=target, headers=fields)
        for message in (head, h11.Data(data=body), h11.EndOfMessage()):
            writer.write(conn.send(message) or b"")
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await reader.read(READ))
                continue
            if isinstance(event, h11.InformationalResponse):
                continue
            if isinstance(event, h11.Response):
                kept = tuple((k, v) for k, v in event.headers.raw_items() if k.lower() not in HOP)
                raw = event.headers.raw_items()
                sized = [v for k, v in raw if k.lower() == b"content-length"]
                said = (*kept, (b"content-length", sized[0])) if sized else kept
                out.send((Head(event.status_code, event.reason, said, chunked=not sized),))
                headed = True
            elif isinstance(event, h11.Data):
                out.send((Body(0.0, bytes(event.data)),))
                await out.drain()
            elif isinstance(event, h11.EndOfMessage):
                out.send((END,))
                return True
            else:  # ConnectionClosed before the end
                raise h11.RemoteProtocolError("the recording proxy closed the response")
    except (h11.ProtocolError, OSError) as e:
        if not headed:
            error_response(out, 502, f"ssetape: relaying a miss failed: {e}")
            return True
        out.abort()  # cut where the upstream (or the proxy) cut it
        return False
    finally:
        writer.close()


class Episodes:
    """Misses of a replay that records new episodes: each relayed once, the identical ones
    that arrive meanwhile held until its recording joins the tape."""

    def __init__(self, index: RequestIndex, port: int, *, coalesce: bool = True) -> None:
        self.index = index
        self.port = port
        self.coalesce = coalesce
        self.recorded = 0  # misses relayed to the recording proxy
        self._pending: dict[str, asyncio.Future[None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def answer(
        self,
        again: Callable[[float], Awaitable[bool]],
        out: ResponseWriter[Any],
        request: tuple[list[bytes], dict[bytes, bytes], bytes],
        match: tuple[str, str, str],
    ) -> bool:
        """Answer a miss: relay it, or wait for the identical one being recorded and then
        answer as the tape does (``again``: the front's answer, with offset zero given)."""
        request_line, headers, body = request
        method, host, target = match
        what = f"{method} {host}{target}"
        if not self.coalesce:
            self.recorded += 1
            log.info("ssetape: recording %s (a miss)", what)
            return await relay(self.port, out, request_line, headers, body)
        loop = asyncio.get_running_loop()
        key = await loop.run_in_executor(None, self.index.key, method, host, target, body or None)
        if (pending := self._pending.get(key)) is not None:
            await asyncio.shield(pending)
            return await again(time.monotonic())  # replayed from it now (or its turn comes)
        done: asyncio.Future[None] = loop.create_future()
        self._pending[key] = done
        had = self.index.recordings(key)
        self.recorded += 1
        log.info("ssetape: recording %s (a miss)", what)
        try:
            return await relay(self.port, out, request_line, headers, body)
        finally:
            # Held until the recorder stored it (the next identical request is then a hit),
            # but not by this connection: its next request may be another.
            task = loop.create_task(self._settle(key, had, done))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _settle(self, key: str, had: int, done: asyncio.Future[None]) -> None:
        try:
            await self._joined(key, had)
        finally:
            if self._pending.get(key) is done:
                del self._pending[key]
            done.set_result(None)

    async def _joined(self, key: str, had: int) -> None:
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + JOIN_TIMEOUT
        while time.monotonic() < deadline:
            await loop.run_in_executor(None, self.index.refresh)
            if self.index.recordings(key) > had:
                return
            await asyncio.sleep(JOIN_POLL)
        log.warning("ssetape: a recorded miss was not stored within %gs", JOIN_TIMEOUT)
