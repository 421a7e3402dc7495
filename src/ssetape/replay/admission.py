"""How many TLS handshakes the forward-mode replay server lets run at once.

A TLS handshake costs each side a few hundred microseconds to a millisecond of its one event
loop (key exchange, signatures, Python's TLS state machine), most of it when the other side's
first flight arrives. Two hundred clients that connect at once would have their handshakes
arrive together: the server's loop, and a Python client's, would each spend turns of 50-150 ms
on them, and every stream already playing, every response head due, waits that long (it is
the client's loop that reads them). Streams are what replay must keep on time; a connection
being set up has no recorded timing. So a tunnel is answered when one of a few handshake slots
is free: the slot comes back when its handshake ends, which is when the client has done its
part too, so neither side's backlog grows past a few handshakes, at whatever pace the slower
one sets. A client that stalls in its handshake gives its slot back after ``HOLD`` seconds.
Only clients near this machine take a slot (the server asks the kernel for the connection's
round trip): a far one is paced by its round trips already, and a slot held across two of
them would cap a remote burst at a few handshakes per round trip.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
from collections.abc import AsyncIterator, Callable

__all__ = ["Admission", "on_this_machine", "share"]

SLOTS = 4  # handshakes in progress at once
HOLD = 0.05  # seconds one handshake may keep its slot


def share(processes: int) -> int:
    """Slots for each of ``processes`` that serve one port (``--workers``): the backlog that
    slots bound is the client's and the machine's as much as one loop's, so the processes split
    one budget. Measured at 200 cold HTTPS streams over two workers (docs/BENCHMARKS.md): 2
    slots each kept TTFB p95 at 3.5-5.4 ms, 4 each at 7.2-11.2."""
    return max(1, SLOTS // max(1, processes))


def on_this_machine(peer: object) -> bool:
    """Whether a socket peer (a peername) is this machine: loopback, a dual-stack listener's
    ``::ffff:127.0.0.1``, or not an IP socket at all."""
    try:
        ip = ipaddress.ip_address(peer[0])  # type: ignore[index]
    except (TypeError, IndexError, KeyError, ValueError):
        return True
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


class Admission:
    """``slots`` handshakes at once, first come first served; a slot held past ``hold``
    seconds is given back (the handshake goes on without it)."""

    def __init__(self, slots: int = SLOTS, hold: float = HOLD) -> None:
        self.hold = hold
        self._slots = asyncio.Semaphore(slots)

    async def take(self) -> Callable[[], None]:
        """Wait for a slot; the answer gives it back (once, however often it is called), and
        is called by itself after ``hold`` seconds."""
        await self._slots.acquire()
        released = False
        timer: asyncio.TimerHandle | None = None

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                if timer is not None:
                    timer.cancel()
                self._slots.release()

        timer = asyncio.get_running_loop().call_later(self.hold, release)
        return release

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold a slot for the body's handshake, at most ``hold`` seconds."""
        release = await self.take()
        try:
            yield
        finally:
            release()
