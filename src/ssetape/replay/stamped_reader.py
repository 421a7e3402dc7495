"""A stream reader that notes when its bytes arrived: the replay servers' offset zero."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import SupportsIndex

__all__ = ["StampedReader", "arrival"]


class StampedReader(asyncio.StreamReader):
    """A stream reader that notes when the loop last received bytes for it.

    A request's offset zero is the moment it arrived, not the moment the server got round to
    it: when two hundred requests arrive together, the loop reads them all in one turn, then
    serves them one after another, and the last would otherwise start its recorded timing late
    by all the work before it. The stamp is taken as the bytes come off the socket (or out of
    TLS), the earliest point this process sees them."""

    fed_at = 0.0

    def feed_data(self, data: Iterable[SupportsIndex]) -> None:
        self.fed_at = time.monotonic()
        super().feed_data(data)


def arrival(reader: asyncio.StreamReader) -> float:
    """When the bytes read last from ``reader`` arrived (``time.monotonic()``): now, for a
    reader that keeps no stamp."""
    if isinstance(reader, StampedReader) and reader.fed_at:
        return reader.fed_at
    return time.monotonic()
