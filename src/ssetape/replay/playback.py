"""One recorded response, ready to be written back: the head and the timed body pieces.

Made once per recording (the player caches them), so that a replay only writes bytes at their
deadlines: the HTTP/1.1 framing of every piece is done here, not per replay.
"""

from __future__ import annotations

from dataclasses import dataclass

from ssetape.storage.models import Chunk, Event, Exchange
from ssetape.vocabulary import ExchangeState, Header

__all__ = ["HOP_BY_HOP", "Playback", "incomplete"]

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "transfer-encoding",
        "content-length",
        "proxy-connection",
        "te",
        "trailer",
        "upgrade",
    }
)


@dataclass(frozen=True, slots=True)
class Playback:
    """Head bytes and (offset seconds, bytes) pieces of one recorded response."""

    head: bytes
    ttfb: float
    pieces: tuple[tuple[float, bytes], ...]
    stream: bool
    complete: bool  # False: cut the connection after the last piece, as the recording ended
    status: int
    head_no_body: bytes  # for HEAD and bodiless statuses: the recorded headers, no framing
    incomplete: str | None = None  # what the recording misses (the header says it too)

    @classmethod
    def of(
        cls, x: Exchange, events: list[Event], chunks: list[Chunk], *, allow_gaps: bool = False
    ) -> Playback:
        """The recording as it is to be played: up to its first gap unless ``allow_gaps``."""
        stream = x.is_stream
        headers = [(k, v) for k, v in (x.response_headers or []) if k.lower() not in HOP_BY_HOP]
        missing = incomplete(x)
        complete = x.state == ExchangeState.COMPLETED and missing is None
        wire = bool(chunks)  # encoded: its wire chunks are what is sent
        if missing is not None:
            headers.append((Header.INCOMPLETE.value, missing))
            if x.gap_seq is not None and not allow_gaps:
                # The gap is in the rows replay sends: wire chunks if encoded, else events.
                if wire:
                    chunks = [c for c in chunks if c.seq < x.gap_seq]
                else:
                    events = [e for e in events if e.seq < x.gap_seq]
            elif allow_gaps:
                complete = x.state == ExchangeState.COMPLETED
        pieces: list[tuple[float, bytes]] = []
        if stream:
            # Encoded streams replay their wire chunks, plain ones their events; events that
            # arrived in one read stay one write, as they came.
            rows = (
                [(c.offset_us, c.data) for c in chunks]
                if wire
                else [(e.offset_us, e.raw) for e in events]
            )
            for off, data in rows:
                if pieces and pieces[-1][0] == off / 1e6:
                    pieces[-1] = (pieces[-1][0], pieces[-1][1] + data)
                else:
                    pieces.append((off / 1e6, data))
            # Framed once here, not per replay.
            pieces = [(off, b"%x\r\n%s\r\n" % (len(data), data)) for off, data in pieces if data]
            headers.append(("transfer-encoding", "chunked"))
        else:
            body = x.response_body or b""
            pieces.append(((x.duration_us or x.ttfb_us or 0) / 1e6, body))
            headers.append(("content-length", str(len(body))))
        status = x.status or 502
        first = f"HTTP/1.1 {status} {x.reason or ''}".rstrip()
        recorded = [(k, v) for k, v in (x.response_headers or []) if k.lower() not in HOP_BY_HOP
                    or k.lower() == "content-length"]  # fmt: skip
        return cls(
            status=status,
            head_no_body=_head(first, recorded),
            head=_head(first, headers),
            ttfb=(x.ttfb_us or 0) / 1e6,
            pieces=tuple(pieces),
            stream=stream,
            complete=complete,
            incomplete=missing,
        )


def incomplete(x: Exchange) -> str | None:
    """What a recording misses, in one header-safe line; None when it is whole (an upstream
    that cut the stream, or a client that left, is recorded whole: that is what happened)."""
    if x.gap_seq is None and x.state != ExchangeState.INTERRUPTED:
        return None
    where = f"from event #{x.gap_seq}: " if x.gap_seq is not None else ""
    why = x.error or "the recorder stopped before the exchange ended"
    text = f"{where}{why}"
    return "".join(c if " " <= c <= "~" else "?" for c in text)[:300]


def _head(first: str, headers: list[tuple[str, str]]) -> bytes:
    lines = [first, *(f"{k}: {v}" for k, v in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "surrogateescape")
