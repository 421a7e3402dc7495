"""One addon's ear on the recorder's link: its reports, heard on the link's reading thread.

The recorder replaces its link when ``ssetape_db`` changes (and has none before it runs),
so an addon that hears the reports (metrics, OTLP) follows whichever link is current.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ssetape.recording.link import RecordLink
from ssetape.recording.protocol import Report

__all__ = ["LinkListener"]


class LinkListener:
    def __init__(self, hear: Callable[[Report, Any], None]) -> None:
        self._hear = hear
        self._link: RecordLink | None = None

    def follow(self, link: RecordLink | None) -> None:
        """Hear ``link`` from now on (None: no link), and no longer the one heard before."""
        if link is self._link:
            return
        self.stop()
        if link is not None:
            link.listeners.add(self._hear)
        self._link = link

    def stop(self) -> None:
        if self._link is not None:
            self._link.listeners.remove(self._hear)
            self._link = None
