"""Plays a recorded WebSocket session to a client that opens it: the 101 for its key, the
recorded server frames on their timers, each from the client frame it answers, and the
recorded end (:mod:`ssetape.replay.ws_recording` says what is due when).

The HTTP/1.1 server sees an upgrade request and hands its connection over
(:class:`WsUpgrade`, on the response writer); the player, which knows the recording, runs a
:class:`WsSession` on it. Every write is a timer callback at its absolute deadline, framed
ahead, as the HTTP player's; the server frames are read from the store a page at a time ahead
of their deadlines (:mod:`ssetape.replay.ws_pages`), never held whole. The client's frames are
read as they come and matched in order (per ``stream_id``). A client frame that differs is a
miss: told and counted where the front tells and counts its HTTP misses (``on_miss``), and
answered at once (:mod:`ssetape.replay.ws_miss`).
Replay faults (``--fault``) cut, stall or end the session as :mod:`ssetape.replay.ws_faults`
says.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from ssetape.framing.websocket import (
    TEXT,
    Closed,
    HandshakeRefused,
    Received,
    WebSocket,
    frame,
    payload_of,
)
from ssetape.replay.faults import FaultKind
from ssetape.replay.miss import Miss
from ssetape.replay.stamped_reader import arrival
from ssetape.replay.ws_faults import ERROR_CLOSE, SessionFaults, fault_event
from ssetape.replay.ws_miss import MISS_REASON, POLICY, FrameRules, error_event, frame_miss
from ssetape.replay.ws_pages import Pages, Reads
from ssetape.replay.ws_recording import UPGRADE, ClientFrame, Ending, WsRecording, canonical_frame
from ssetape.vocabulary import Direction, Opcode

__all__ = ["CLOSE_WAIT", "WsSession", "WsUpgrade"]

log = logging.getLogger("ssetape.replay")

CLOSE_WAIT = 2.0  # seconds a close waits for the client's before the connection is closed
_READ = 1 << 16


@dataclass(slots=True)
class WsUpgrade:
    """An upgrade request's connection, for whoever plays a session on it: the request's
    head as it came (the handshake reads the client's key and offers from it)."""

    head: bytes
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    request: str  # "GET host/path", as a miss names it
    taken: bool = False  # a session ran on it: the connection is no longer HTTP

    @classmethod
    def of(
        cls,
        head: bytes,
        request_line: list[bytes],
        headers: dict[bytes, bytes],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> WsUpgrade | None:
        """The upgrade a request asks for, or None (not a WebSocket upgrade)."""
        if request_line[0] != b"GET" or len(request_line) < 2:
            return None
        if b"websocket" not in headers.get(b"upgrade", b"").lower():
            return None
        target = request_line[1].decode("latin-1").partition("?")[0]
        if "://" in target:  # forward mode: absolute-form, or a tunnel's
            where = target.split("://", 1)[1]
        else:
            where = headers.get(b"host", b"").decode("latin-1") + target
        return cls(head, reader, writer, f"GET {where}")


def tell(miss: Miss) -> None:
    """A miss told where no front counts them (the timed server behind the proxy, whose
    misses the proxy's replayer counts)."""
    log.warning("ssetape: %s", miss.message)


class WsSession:
    """One replay of ``recording`` on ``upgrade``'s connection; offset zero ``t0`` (a
    ``time.monotonic()`` value: when the upgrade request was in); ``reads``: the store its
    frames are read from as they come due. ``faults``: those it is played with; ``on_miss``:
    hears of each client frame that missed."""

    def __init__(
        self,
        recording: WsRecording,
        upgrade: WsUpgrade,
        reads: Reads,
        *,
        t0: float,
        speed: float,
        rules: FrameRules,
        faults: SessionFaults | None = None,
        on_miss: Callable[[Miss], object] = tell,
    ) -> None:
        self.rec = recording
        self.reads = reads
        self.up = upgrade
        self.transport = upgrade.writer.transport
        self.speed = speed
        self.rules = rules
        self.faults = faults
        self.on_miss = on_miss
        self.request = upgrade.request  # "GET host/path", as a miss names it
        self.loop = asyncio.get_running_loop()
        self.base = self.loop.time() - (time.monotonic() - t0)  # t0 on the loop's clock
        self.ws = WebSocket()
        self.arrived: list[float | None] = [None] * recording.clients
        self.expect = recording.orders(Direction.CLIENT)  # client frames by lane, in order
        self.lane_of = {name: i for i, name in enumerate(recording.lanes)}
        self.matched: dict[int, int] = {}  # how many of each lane came
        # A fault that ends the session after N server frames: the others never go out.
        limit = faults.limit if faults is not None else None
        self.queues = recording.orders(Direction.SERVER)  # server frames by lane, in order
        self.stop = {lane: len(q) if limit is None else bisect.bisect_left(q, limit)
                     for lane, q in self.queues.items()}  # fmt: skip
        self.pages = Pages(recording, reads, self.queues, self._read_done,
                           self.transport.get_write_buffer_size, upgrade.writer.drain)  # fmt: skip
        self.near: asyncio.Future[bytes | None] | None = None  # an error fault's neighbour
        self.sent: dict[int, int] = dict.fromkeys(self.queues, 0)
        self.last_due: dict[int, float] = {}
        self.timers: dict[int, asyncio.TimerHandle] = {}
        self.ending: asyncio.TimerHandle | None = None
        self.cutting: asyncio.TimerHandle | None = None  # cut:ms
        self.opened = self.base  # when the 101 went out
        self.heard = 0  # client frames so far
        self.misses = 0
        self.silent = False  # the session is ending: no more frames go out, none are heard

    async def run(self) -> None:
        """Serve the session until it ends; the connection is closed after."""
        self.up.taken = True
        try:
            self.ws.request(self.up.head)
        except HandshakeRefused as e:
            log.warning("ssetape: %s: not a WebSocket upgrade a server may accept: %s",
                        self.request, e)  # fmt: skip
            self.transport.write(e.answer)
            self.transport.close()
            return
        accept = self.ws.accept(self.rec.subprotocol_for(self.ws.subprotocols), self.rec.headers)
        opened = self.base + self._scaled(self.rec.ttfb_us)
        if (delay := opened - self.loop.time()) > 0:
            await asyncio.sleep(delay)
        self.transport.write(accept)
        # Nothing goes before the 101, whatever the recording says.
        self.last_due = dict.fromkeys(self.queues, opened)
        self.opened = opened
        if self.faults is not None and self.faults.cut_at is not None:
            # Wall-clock from the request, as an HTTP stream's; never before the 101.
            at = max(self.base + self.faults.cut_at, opened)
            self.cutting = self.loop.call_at(at, self._cut)
        if self.faults is not None and self.faults.ending is FaultKind.ERROR:
            self.near = self.loop.run_in_executor(None, self._near, self.faults.after)
        self._kick()
        try:
            await self._read()
        finally:
            self._stop()

    async def _read(self) -> None:
        """Until the connection ends (each way of ending a session closes it)."""
        reader = self.up.reader
        while True:
            try:
                data: bytes | None = await reader.read(_READ)
            except (ConnectionError, OSError):
                data = b""
            at = self.loop.time() - (time.monotonic() - arrival(reader))
            got, back = self.ws.receive(data or None)
            if back and not self.transport.is_closing():
                self.transport.write(back)
            for event in got:
                if isinstance(event, Received):
                    await self._heard(event, at)
                elif isinstance(event, Closed):  # answered (in `back`), or the client left
                    self._stop()
                    self.transport.close()
            if not data:
                break

    async def _heard(self, message: Received, at: float) -> None:
        """A client frame: the next one recorded in its stream, or a miss."""
        if self.silent:
            return
        self.heard += 1
        number, misses = self.heard, self.misses + 1
        got = canonical_frame(message.binary, message.payload, self.rec.ignore)
        body = got["message"]
        sid = body.get("stream_id") if isinstance(body, dict) else None
        lane = self.lane_of.get(sid if isinstance(sid, str) else None, -1)
        order = self.expect.get(lane, ())
        n = self.matched.get(lane, 0)
        i = order[n] if n < len(order) else None
        if i is not None and self.rec.matches(i, got):
            self.matched[lane] = n + 1
            self.arrived[i] = at
            self._kick()
            return
        self.misses = misses
        expected = self.rec.client(i) if i is not None else None
        if expected is not None and expected.canonical is None:  # not kept: read to tell it
            expected = await self.loop.run_in_executor(None, self._canonical, expected)
        miss = frame_miss(self.rules, self.request, number, self.rec.id, expected, got)
        self.on_miss(miss)
        if self.rec.error_events:  # the session goes on: the client may send the next
            if not self.transport.is_closing():
                self.transport.write(frame(TEXT, error_event(miss, misses, message.payload)))
            return
        self._close(POLICY, f"{MISS_REASON}: {miss.message}")

    def _canonical(self, c: ClientFrame) -> ClientFrame:
        """In a thread: client frame ``c`` with its canonical form, read again."""
        found = self.reads.payloads(self.rec.id, [c.seq]).get(c.seq)
        if found is None:  # gone from the store since: say so where the form would be
            return replace(c, canonical={"message": "<no longer stored>"})
        opcode, raw = found
        return replace(c, canonical=canonical_frame(opcode == Opcode.BINARY, raw, self.rec.ignore))

    def _near(self, after: int) -> bytes | None:
        """In a thread: the payload of the server frame an error fault replaces (``after``),
        else of the last one (an error event follows it); None if there is none."""
        n = self.rec.servers
        i = after if after < n else n - 1
        if i < 0:
            return None
        if i < len(self.rec.head):
            return payload_of(self.rec.head[i])
        seq = self.rec.server_seq[i]
        try:
            found = self.reads.payloads(self.rec.id, [seq]).get(seq)
        except Exception:  # the error goes out all the same, without what it follows
            log.exception("ssetape replay: cannot read recording #%d", self.rec.id)
            return None
        return found[1] if found is not None else None

    def _read_done(self, error: BaseException | None) -> None:
        """A page came (their frames may be due: the timers are set) or its read failed
        (the session cannot go on as recorded: it is cut, as a stream whose read fails)."""
        if error is None:
            self._kick()
            return
        log.error("ssetape replay: cannot read recording #%d while playing it: %s",
                  self.rec.id, error)  # fmt: skip
        self._cut()

    # -- the server's side, on timers ------------------------------------------------

    def _scaled(self, us: int) -> float:
        return us / 1e6 / self.speed if self.speed > 0 else 0.0

    def _hold(self, i: int) -> float:
        return self.faults.hold(i, self.rec.server_anchor) if self.faults is not None else 0.0

    def _due(self, i: int, lane: int) -> float | None:
        """When server frame ``i`` is due (None: the client frame it answers has not
        come)."""
        anchor = self.rec.server_anchor[i]
        at = self.base if anchor == UPGRADE else self.arrived[anchor]
        if at is None:
            return None
        return max(at + self._scaled(self.rec.delta_us(i)) + self._hold(i), self.last_due[lane])

    def _kick(self) -> None:
        """Set the timer of every stream whose next frame's time is known."""
        if self.silent:
            return
        pending = False
        for lane, queue in self.queues.items():
            i, end = self.sent[lane], self.stop[lane]
            if i >= end:
                continue
            pending = True
            self.pages.want(lane, i, end)
            if lane in self.timers or not self.pages.ready(queue[i]):
                continue  # a page on its way sets the timer when it comes
            due = self._due(queue[i], lane)
            if due is not None:
                self.timers[lane] = self.loop.call_at(due, self._emit, lane, due)
        if not pending and self.ending is None:
            self._schedule_end()

    def _emit(self, lane: int, due: float) -> None:
        """Write the stream's frames due by ``due`` as one write, then set its next timer."""
        del self.timers[lane]
        if self.silent or self.transport.is_closing():
            return
        queue, i, end = self.queues[lane], self.sent[lane], self.stop[lane]
        out: list[bytes] = []
        while i < end:
            when = self._due(queue[i], lane)
            if when is None or when > due:
                break
            data = self.pages.take(lane, queue[i])
            if data is None:
                break  # its page is on its way: it goes out when it comes
            out.append(data)
            i += 1
        self.sent[lane] = i
        self.last_due[lane] = due
        if out:
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))
        self._kick()

    def _schedule_end(self) -> None:
        """Every frame that goes out went: the end is next (the recorded one, or a fault's)."""
        end, faults = self.rec.end, self.faults
        anchor, delta = end.anchor, self._scaled(end.delta_us)
        if faults is not None and faults.cut_at is not None:
            return  # the cut's timer ends the session
        if faults is not None and faults.ending is not None:
            i = faults.after
            if faults.ending is FaultKind.CUT or i >= self.rec.servers:
                anchor, delta = UPGRADE, 0.0  # right after the last frame that went out
            else:  # the error comes when the frame it replaces would have
                anchor = self.rec.server_anchor[i]
                delta = self._scaled(self.rec.delta_us(i)) + self._hold(i)
        elif end.kind is Ending.CLIENT:
            return  # the recorded client closed: so will this one
        at = self.base if anchor == UPGRADE else self.arrived[anchor]
        if at is None:
            return  # waits for the client frame it follows (_kick comes again then)
        due = max(at + delta, self.opened, *self.last_due.values())
        self.ending = self.loop.call_at(due, self._end)

    def _end(self) -> None:
        if self.silent:
            return
        end, faults = self.rec.end, self.faults
        if faults is not None and faults.ending is FaultKind.ERROR:
            self._error(faults.after)
        elif (faults is not None and faults.ending is FaultKind.CUT) or end.kind is Ending.CUT:
            self._cut()  # as recorded or as the fault says
        else:
            self._close(end.code, end.reason)

    def _cut(self) -> None:
        """The connection closes with no close frame: an abnormal closure (1006)."""
        if self.silent:
            return
        self._stop()
        self.transport.close()

    def _error(self, after: int) -> None:
        """The API's error in place of server frame ``after`` and all after it."""
        near = self.near
        if near is not None and not near.done():  # its neighbour is still being read
            near.add_done_callback(lambda _: None if self.silent else self._error(after))
            return
        payload = None
        if near is not None and not near.cancelled() and near.exception() is None:
            payload = near.result()
        event = fault_event(self.rec.api, payload, replaces=after < self.rec.servers)
        if event is None:
            self._close(*ERROR_CLOSE)
            return
        # The session stays open, as the API's does; the server says nothing more.
        self._stop()
        if not self.transport.is_closing():
            self.transport.write(frame(TEXT, event))

    def _close(self, code: int, reason: str) -> None:
        """Close with ``code``; the connection ends at the client's close, or after
        CLOSE_WAIT."""
        self._stop()
        if not self.transport.is_closing():
            self.transport.write(self.ws.close(code, reason))
        # Reading goes on: the client's close answers ours, and then the connection closes.
        self.loop.call_later(CLOSE_WAIT, self.transport.close)

    def _stop(self) -> None:
        """No more server frames."""
        self.silent = True
        self.pages.close()
        for handle in (*self.timers.values(), self.ending, self.cutting):
            if handle is not None:
                handle.cancel()
        self.timers.clear()
