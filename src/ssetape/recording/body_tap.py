"""A request body as it streams through the recording proxy: each chunk goes on at once,
unchanged; the recorder keeps it up to ``MAX_BODY`` and only hashes it past that.

mitmproxy buffers a request body whole before its ``request`` hook (a 300 MiB upload held
1.14 GiB). A body over the bound, or of unknown length, is streamed through this tap instead,
so the proxy holds at most ``MAX_BODY`` of it, and what is stored is the same stand-in
(``{"ssetape_body_not_stored": {"bytes", "sha256"}}``) a buffered body over the bound gets,
so replay matches it alike.

A response body of unknown length, or one over ``ssetape_max_response_body``, streams
through one too (``head``: its first bytes are kept past the bound, for `show`).
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

    def __init__(self, bound: int = MAX_BODY, head: int = 0) -> None:
        self._bound = bound
        self._parts: list[bytes] = []
        self._head_size = min(head, bound)
        self._head = b""  # past the bound: its first ``head`` bytes
        self.size = 0
        # Hashed as it passes, chunk by chunk: hashing what was kept only once the bound is
        # crossed would hash 16 MiB at once on the proxy's event loop.
        self._hash: Any = hashlib.sha256()
        self.broken = False  # a recording bug: the body is not known, the traffic unharmed

    def __call__(self, data: bytes) -> bytes:
        if data and not self.broken:
            try:
                self._add(data)
            except Exception:  # never let a recording bug touch the traffic
                self.broken, self._parts = True, []
                log.exception("ssetape: cannot record a request body; traffic continues")
        return data

    def _add(self, data: bytes) -> None:
        self.size += len(data)
        self._hash.update(data)
        if self.size <= self._bound:
            self._parts.append(data)
        elif self._parts:
            # Past the bound: only its size, hash and first bytes are kept (joined up to
            # ``head`` only: never 16 MiB at once on the event loop).
            self._head = _first([*self._parts, data], self._head_size)
            self._parts = []

    @property
    def bound(self) -> int:
        return self._bound

    @property
    def over(self) -> bool:
        """Past the bound: only its size and hash are known."""
        return self.size > self._bound

    def stand_in(self) -> bytes:
        """What passed so far, as a stand-in whatever its size: the body of a request the
        upstream answered before it ended (a 413, a 401) is incomplete, never parsed."""
        if self.broken:
            raise RuntimeError("the request body tap failed")
        return placeholder_of(self.size, self._hash.copy().hexdigest())

    def sha256(self) -> str:
        """The hex SHA-256 of what passed so far."""
        return str(self._hash.copy().hexdigest())

    def head(self) -> bytes:
        """Its first bytes: up to ``head`` past the bound, else all of it."""
        return self._head if self.over else _first(self._parts, self._head_size)

    def body(self) -> bytes:
        """The body as read, or past the bound its stand-in (JSON bytes)."""
        if self.broken:
            raise RuntimeError("the request body tap failed")
        if self.over:
            return placeholder_of(self.size, self._hash.hexdigest())
        return b"".join(self._parts)


def _first(parts: list[bytes], n: int) -> bytes:
    """The first ``n`` bytes of ``parts``, joining no more than those."""
    out: list[bytes] = []
    for part in parts:
        if n <= 0:
            break
        out.append(part[:n])
        n -= len(out[-1])
    return b"".join(out)
