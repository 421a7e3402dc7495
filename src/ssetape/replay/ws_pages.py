"""The server frames a replayed WebSocket session holds while it plays: the recording's head
(its first frames, kept with it), then for each lane (``stream_id``) the page it is playing
and the next one, read from the store in a thread while the current one plays, as long HTTP
streams are (``Player._play_pages``). Memory is bounded by pages, not by the session: an hour
of audio is held a page (PAGE_ROWS frames, PAGE_BYTES of payload) at a time per lane.

A lane's next page is read once fewer than half a page of its frames are left, whether or
not the client frame they answer has come: the answer is then read before it is due. Not
while the connection holds a page's worth of bytes the client has not read: a client that
reads slower than recorded holds the reading back (the frames after wait for its reads, as
a slow HTTP client's do), so the write buffer never holds the session either.
"""

from __future__ import annotations

import asyncio
import bisect
from array import array
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from ssetape.replay.ws_recording import WsRecording, framed
from ssetape.vocabulary import Opcode

__all__ = ["PAGE_BYTES", "PAGE_ROWS", "Pages", "Reads"]

PAGE_ROWS = 256  # server frames one read brings, at most
PAGE_BYTES = 1 << 20  # their payload bytes, at most (one frame: any size)


class Reads(Protocol):
    """The store's side (``storage.session_frames.SessionFrames``): blocking."""

    def payloads(self, exchange_id: int, seqs: Sequence[int]) -> dict[int, tuple[str, bytes]]: ...


class Pages:
    """The framed frames of ``orders`` (each lane's server frame numbers, in order) that are
    read and not yet taken; ``on_read`` hears of each read's end (its error, or None), and of
    the client's having read what held a read back; ``unread``: the bytes written and not yet
    taken by the client, ``drained``: waits until they are few."""

    def __init__(
        self,
        rec: WsRecording,
        reads: Reads,
        orders: dict[int, array[int]],
        on_read: Callable[[BaseException | None], None],
        unread: Callable[[], int],
        drained: Callable[[], Awaitable[None]],
    ) -> None:
        self.rec = rec
        self.reads = reads
        self.orders = orders
        self.on_read = on_read
        self.unread = unread
        self.drained = drained
        self.waiting: asyncio.Task[None] | None = None  # for the client to read
        self.loop = asyncio.get_running_loop()
        self.framed: dict[int, bytes] = dict(enumerate(rec.head))
        # How far each lane is read (or being read): the head is a prefix of the frames.
        self.ahead = {lane: bisect.bisect_left(o, len(rec.head)) for lane, o in orders.items()}
        self.held = dict.fromkeys(orders, 0)  # payload bytes read and not taken, by lane
        for i, data in self.framed.items():
            lane = rec.server_lane[i]
            if lane in self.held:
                self.held[lane] += len(data)
        self.reading: set[int] = set()
        self.closed = False

    def ready(self, i: int) -> bool:
        return i in self.framed

    def take(self, lane: int, i: int) -> bytes | None:
        """Frame ``i``, framed, gone from here; None if it is not read yet."""
        data = self.framed.pop(i, None)
        if data is not None:
            self.held[lane] -= len(data)
        return data

    def want(self, lane: int, sent: int, end: int) -> None:
        """Read ``lane``'s next page if fewer than half a page of its frames are left (its
        first ``sent`` went out; those from ``end`` on never go)."""
        ahead = self.ahead[lane]
        if self.closed or lane in self.reading or ahead >= end:
            return
        if ahead - sent >= PAGE_ROWS // 2 and self.held[lane] >= PAGE_BYTES // 2:
            return
        if self.unread() >= PAGE_BYTES:
            if self.waiting is None:
                self.waiting = self.loop.create_task(self._wait_for_the_client())
            return
        order, sizes = self.orders[lane], self.rec.server_size
        stop, size = ahead + 1, sizes[order[ahead]]
        while stop < end and stop - ahead < PAGE_ROWS and size + sizes[order[stop]] <= PAGE_BYTES:
            size += sizes[order[stop]]
            stop += 1
        self.ahead[lane] = stop
        self.reading.add(lane)
        picked = order[ahead:stop].tolist()
        read = self.loop.run_in_executor(None, self._read, picked)
        read.add_done_callback(lambda done: self._done(lane, done))

    async def _wait_for_the_client(self) -> None:
        try:
            await self.drained()
            if self.unread() >= PAGE_BYTES:  # a buffer that never pauses the writer
                await asyncio.sleep(0.01)
        except ConnectionError:
            return  # it left: the session ends
        finally:
            self.waiting = None
        if not self.closed:
            self.on_read(None)  # the reads held back may go now

    def _read(self, picked: list[int]) -> dict[int, bytes]:
        """In a thread: the frames ``picked``, framed."""
        seqs = [self.rec.server_seq[i] for i in picked]
        got = self.reads.payloads(self.rec.id, seqs)
        out: dict[int, bytes] = {}
        for i, seq in zip(picked, seqs, strict=True):
            if seq not in got:
                raise LookupError(f"recording #{self.rec.id}: its message {seq} is gone")
            opcode, raw = got[seq]
            out[i] = framed(opcode == Opcode.BINARY, raw)
        return out

    def _done(self, lane: int, done: asyncio.Future[dict[int, bytes]]) -> None:
        self.reading.discard(lane)
        if done.cancelled():
            return
        error = done.exception()  # taken even when closed: asyncio warns of one left
        if self.closed:
            return
        if error is None:
            page = done.result()
            self.framed.update(page)
            self.held[lane] += sum(map(len, page.values()))
        self.on_read(error)

    def close(self) -> None:
        """The session ended: what is read goes, and reads under way are dropped."""
        self.closed = True
        self.framed.clear()
        if self.waiting is not None:
            self.waiting.cancel()
