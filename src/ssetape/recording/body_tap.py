"""A request body as it streams through the recording proxy: each chunk goes on at once,
unchanged; the recorder keeps it up to ``MAX_BODY`` and only hashes it past that.

mitmproxy buffers a request body whole before its ``request`` hook (a 300 MiB upload held
1.14 GiB). A body over the bound, or of unknown length, is streamed through this tap instead,
so the proxy holds at most ``MAX_BODY`` of it, and what is stored is the same stand-in
(``{"ssetape_body_not_stored": {"bytes", "sha256"}}``) a buffered body over the bound gets,
so replay matches it alike.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from ssetape.matching import placeholder_of
from ssetape.vocabulary import MAX_BODY

__all__ = ["BodyTap"]

log = logging.getLogger("ssetape.recording.body_tap")


class BodyTap:
    """``flow.request.stream``: called with each chunk, returns it as it came."""

    def __init__(self, bound: int = MAX_BODY) -> None:
        self._bound = bound
        self._parts: list[bytes] = []
        self.size = 0
        self._hash: Any = None  # hashlib's sha256, once past the bound: most bodies never are
        self.broken = False  # a recording bug: the body is not known, the traffic unharmed

    def __call__(self, data: bytes) -> bytes:
        if data and not self.broken:
            try:
                self._add(data)
            except Exception:  # never let a recording bug touch the traffic
                self.broken, self._parts, self._hash = True, [], None
                log.exception("ssetape: cannot record a request body; traffic continues")
        return data

    def _add(self, data: bytes) -> None:
        self.size += len(data)
        if self._hash is None:
            if self.size <= self._bound:
                self._parts.append(data)
                return
            self._hash = hashlib.sha256(b"".join(self._parts))
            self._parts = []
        self._hash.update(data)

    @property
    def over(self) -> bool:
        """Past the bound: only its size and hash are known."""
        return self._hash is not None

    def stand_in(self) -> bytes:
        """What passed so far, as a stand-in whatever its size: the body of a request the
        upstream answered before it ended (a 413, a 401) is incomplete, never parsed."""
        if self.broken:
            raise RuntimeError("the request body tap failed")
        digest = (
            self._hash.copy() if self._hash is not None else hashlib.sha256(b"".join(self._parts))
        )
        return placeholder_of(self.size, digest.hexdigest())

    def body(self) -> bytes:
        """The body as read, or past the bound its stand-in (JSON bytes)."""
        if self.broken:
            raise RuntimeError("the request body tap failed")
        if self._hash is not None:
            return placeholder_of(self.size, self._hash.hexdigest())
        return b"".join(self._parts)
