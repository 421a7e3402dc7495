"""Failed client TLS handshakes, logged once per burst with counts.

mitmproxy logs each failed client handshake on a line of its own, and one whose ClientHello
it cannot parse with every byte the client sent as hex: 300 tunnels that each send 64 KB of
garbage write 40 MB of log. mitmproxy 11 then also logs a traceback for each of them ("mitmproxy
has crashed!": data that arrives after the failure reaches a TLS layer that has none). A
filter on mitmproxy's connection logger drops those lines and counts them instead: the first
failure of a burst is one line, with its reason (a hex dump cut to its size), then a count
at most every ``BURST_QUIET`` seconds while the burst goes on. A client disconnecting during
its handshake stays at mitmproxy's own INFO level, untouched.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import OrderedDict
from typing import Any

from mitmproxy import connection
from mitmproxy.addonmanager import Loader

from ssetape.addons.guard import LogBurst

__all__ = ["TlsFailures"]

# mitmproxy's per-connection logger: where the lines this module replaces are written.
MITM_LOGGER = "mitmproxy.proxy.server"
FAILED = "Client TLS handshake failed. "
CRASHED = "mitmproxy has crashed!"
PEERS_KEPT = 10_000  # clients whose failure may still be followed by mitmproxy's traceback
REASON_CHARS = 300
_HEX = re.compile(r"\b([0-9a-f]{64,})\b")


def shortened(reason: str) -> str:
    """The reason without its hex dump (its size instead), cut to a line's worth."""
    reason = _HEX.sub(lambda m: f"<{len(m.group(1)) // 2} bytes>", reason)
    return reason if len(reason) <= REASON_CHARS else reason[:REASON_CHARS] + "…"


class TlsFailures(logging.Filter):
    """mitmproxy addon and a filter on mitmproxy's connection logger (while it is loaded)."""

    def __init__(self) -> None:
        super().__init__()
        self.burst = LogBurst(
            "ssetape: a client TLS handshake failed ({reason}; from {peer}); further failures "
            "are counted, not logged one by one",
            "ssetape: {n} more client TLS handshakes failed (the last: {reason})",
        )
        self._failed: OrderedDict[Any, None] = OrderedDict()  # peers whose handshake failed
        self._flusher: asyncio.Task[None] | None = None

    # -- the addon -------------------------------------------------------------------

    def load(self, loader: Loader) -> None:
        logging.getLogger(MITM_LOGGER).addFilter(self)

    def running(self) -> None:
        self._flusher = asyncio.get_running_loop().create_task(self._flush_every_second())

    def done(self) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
        self.burst.flush(float("inf"))  # what the last quiet period held back
        logging.getLogger(MITM_LOGGER).removeFilter(self)

    def client_disconnected(self, client: connection.Client) -> None:
        self._failed.pop(client.peername, None)

    async def _flush_every_second(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            self.burst.flush()

    # -- the filter ------------------------------------------------------------------

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True  # not shown at ssetape's verbosity; shown as asked for otherwise
        peer = getattr(record, "client", None)
        message = record.getMessage()
        if message.startswith(FAILED):
            self._failed[peer] = None
            self._failed.move_to_end(peer)
            while len(self._failed) > PEERS_KEPT:
                self._failed.popitem(last=False)
            self.burst.hit(reason=shortened(message[len(FAILED) :]), peer=_address(peer))
            return False
        # The same failure again, as mitmproxy 11's traceback: dropped.
        return not (message.startswith(CRASHED) and peer in self._failed and _after_failure(record))


def _after_failure(record: logging.LogRecord) -> bool:
    """mitmproxy 11's crash on data that reaches a TLS layer whose handshake failed."""
    exc = record.exc_info[1] if record.exc_info else None
    return isinstance(exc, AttributeError) and "bio_write" in str(exc)


def _address(peer: Any) -> str:
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return "an unknown client"
