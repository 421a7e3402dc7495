"""One recorded response, ready to be written back: its head and timed body pieces as typed
parts (:mod:`ssetape.replay.response_parts`), which each protocol's writer frames itself.

Made once per recording (the player caches them), so that a replay only frames and writes
them. It is also where stored values become bytes for a socket, so what is not a header line,
a status or a reason phrase (a store written by hand or by an older ssetape) is left out here
and logged, never written: a value with CR LF in it would split the response.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from ssetape.http_fields import field_problem, reason_problem, status_problem
from ssetape.replay.response_parts import Body, Fields, Head
from ssetape.storage.models import Exchange
from ssetape.vocabulary import ExchangeState, Header

__all__ = ["HOP_BY_HOP", "Playback", "Row", "Source", "incomplete", "timed_pieces"]

log = logging.getLogger("ssetape.replay")

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
    """The head and the timed body pieces of one recorded response."""

    head: Head
    ttfb: float
    pieces: tuple[Body, ...]
    stream: bool
    complete: bool  # False: cut the connection after the last piece, as the recording ended
    status: int
    head_no_body: Head  # for HEAD and bodiless statuses: the recorded headers, no framing
    incomplete: str | None = None  # what the recording misses (the header says it too)
    # Set when the pieces are left in the store (a long recording): where to read them.
    source: Source | None = None
    size: int = 0  # bytes held: what a cache of playbacks counts
    # Where a stream's rows are (set for every stream) and its API: what a fault replays from.
    rows_at: Source | None = None
    api: str | None = None

    @classmethod
    def of(
        cls,
        x: Exchange,
        rows: Iterable[Row],
        *,
        wire: bool = False,
        allow_gaps: bool = False,
        lazy: bool = False,
    ) -> Playback:
        """The recording as it is to be played: up to its first gap unless ``allow_gaps``.

        ``rows``: its wire chunks if ``wire`` (an encoded stream), else its events, by seq;
        ``lazy``: none are given, the player reads them from the store as it plays."""
        stream = x.is_stream
        stored = _safe_headers(x)
        headers = [(k, v) for k, v in stored if k.lower() not in HOP_BY_HOP]
        missing = incomplete(x)
        complete = x.state == ExchangeState.COMPLETED and missing is None
        stop: int | None = None  # the rows replay sends (wire chunks if encoded) end here
        if missing is not None:
            headers.append((Header.INCOMPLETE.value, missing))
            if x.gap_seq is not None and not allow_gaps:
                stop = x.gap_seq
            elif allow_gaps:
                complete = x.state == ExchangeState.COMPLETED
        pieces: list[Body] = []
        if stream:
            if not lazy:
                pieces = list(timed_pieces(r for r in rows if stop is None or r[0] < stop))
        else:
            body = x.response_body or b""
            pieces.append(Body((x.duration_us or x.ttfb_us or 0) / 1e6, body))
            headers.append(("content-length", str(len(body))))
        status, reason = _status_line(x)
        # As the status line was always written: a reason of blanks is none.
        said = reason.rstrip().encode("utf-8", "surrogateescape")
        recorded = [(k, v) for k, v in stored if k.lower() not in HOP_BY_HOP
                    or k.lower() == "content-length"]  # fmt: skip
        return cls(
            status=status,
            head_no_body=Head(status, said, _fields(recorded)),
            head=Head(status, said, _fields(headers), chunked=stream),
            ttfb=(x.ttfb_us or 0) / 1e6,
            pieces=tuple(pieces),
            stream=stream,
            complete=complete,
            incomplete=missing,
            source=Source(x.id, wire, stop) if lazy and stream else None,
            size=sum(len(data) for _, data in pieces),
            rows_at=Source(x.id, wire, stop) if stream else None,
            api=x.api,
        )


@dataclass(frozen=True, slots=True)
class Source:
    """Where a long recording's pieces are: its wire chunks (``wire``) or events, up to
    ``stop`` (a seq; None: all)."""

    exchange_id: int
    wire: bool
    stop: int | None


# (seq, offset in microseconds, bytes) of one stored event or wire chunk
Row = tuple[int, int, bytes]


def timed_pieces(rows: Iterable[Row]) -> Iterator[Body]:
    """Rows as timed body pieces: rows that arrived in one read (one offset) stay one piece
    (one write), as they came; joined once, never copied per row."""
    at: int | None = None
    parts: list[bytes] = []
    for _, off, data in rows:
        if off != at and parts:
            yield from _chunk(at, parts)
            parts = []
        at = off
        parts.append(data)
    if at is not None:
        yield from _chunk(at, parts)


def _chunk(off_us: int | None, parts: list[bytes]) -> Iterator[Body]:
    data = b"".join(parts)
    if data:
        yield Body((off_us or 0) / 1e6, data)


def incomplete(x: Exchange) -> str | None:
    """What a recording misses, in one header-safe line; None when it is whole (an upstream
    that cut the stream, or a client that left, is recorded whole: that is what happened)."""
    if x.gap_seq is None and x.state != ExchangeState.INTERRUPTED:
        return None
    where = f"from event #{x.gap_seq}: " if x.gap_seq is not None else ""
    why = x.error or "the recorder stopped before the exchange ended"
    text = f"{where}{why}"
    return "".join(c if " " <= c <= "~" else "?" for c in text)[:300]


def _safe_headers(x: Exchange) -> list[tuple[str, str]]:
    """The recorded response headers that are header lines; the others logged, left out."""
    safe: list[tuple[str, str]] = []
    for i, pair in enumerate(x.response_headers or []):
        wrong = "it is not a [name, value] pair"
        if isinstance(pair, list | tuple) and len(pair) == 2:
            name, value = pair
            wrong = field_problem(name, value) or ""
            if not wrong:
                safe.append((name, value))
                continue
        log.warning("ssetape: recording %s: response header #%d not sent: %s", x.id, i + 1, wrong)
    return safe


def _status_line(x: Exchange) -> tuple[int, str]:
    """The recorded status and reason phrase, or what may be written instead (logged)."""
    status, reason = x.status or 502, x.reason or ""
    if (wrong := status_problem(status)) is not None:
        log.warning("ssetape: recording %s: its status %s; sent as 502", x.id, wrong)
        status, reason = 502, ""
    if (wrong := reason_problem(reason)) is not None:
        log.warning("ssetape: recording %s: its reason phrase %s; not sent", x.id, wrong)
        reason = ""
    return status, reason


def _fields(headers: list[tuple[str, str]]) -> Fields:
    return tuple(
        (k.encode("utf-8", "surrogateescape"), v.encode("utf-8", "surrogateescape"))
        for k, v in headers
    )
