"""A WebSocket session on one time axis: the client's frames in a lane above, the server's in a
lane below, and the session's turns, ready to be drawn (``show``, the viewer, ``--svg``).

One pass over the stored messages (``storage.turns``) derives the turns
(:class:`~ssetape.analysis.turns.SessionTurns`) and counts each lane's frames per cell, so a
session of a million frames is a few short lists of counts, never an object per frame; the
frames themselves are kept only while there are few enough to draw one by one. Audio frames
are counted and timed as any frame, never decoded. Frame kinds (event names) come from the
network: whoever draws them escapes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from ssetape.analysis.turns import TURNS_KEPT, MessageFacts, SessionTurns, Turn
from ssetape.storage.models import Exchange
from ssetape.storage.queries import Queries
from ssetape.storage.turns import SessionMessage, TurnReads
from ssetape.views.documents import TURNS_SHOWN, url_of
from ssetape.views.timeline import fmt_us
from ssetape.vocabulary import Direction, Transport

__all__ = [
    "ASK",
    "CONTENT",
    "ERROR",
    "LANES",
    "MARKS_KEPT",
    "OTHER",
    "TURNS_SHOWN",
    "FrameMark",
    "SessionTimeline",
    "is_session",
    "turn_label",
]

LANES = (Direction.CLIENT.value, Direction.SERVER.value)  # top down
# A frame's kind, for its color: a client frame that asked for a turn; a server frame that
# carried content, an error the server sent; anything else.
ASK, CONTENT, ERROR, OTHER = "ask", "content", "error", "other"
MARKS_KEPT = 5000  # frames kept to be drawn one by one; past it, counts per cell only


def is_session(x: Exchange) -> bool:
    return x.transport == Transport.WEBSOCKET


class FrameMark(NamedTuple):
    """One frame on the time axis (a tuple: one per frame of a short session)."""

    seq: int
    offset_us: int
    lane: str  # one of LANES
    kind: str  # ASK, CONTENT, ERROR or OTHER
    label: str  # the kind the recorder named it by: recorded text
    turn: int | None


def _kind(m: SessionMessage, facts: MessageFacts) -> str:
    if m.direction == Direction.CLIENT:
        return ASK if facts.asked else OTHER
    return ERROR if facts.error else CONTENT if facts.carried else OTHER


@dataclass(slots=True)
class SessionTimeline:
    """A session's frames per lane and cell, its turns, and what a picture's title says."""

    title: str
    span_us: int
    cells: int
    # lane -> kind -> frames per cell (kinds that never came are absent)
    counts: dict[str, dict[str, list[int]]]
    marks: list[FrameMark] | None  # None: more than MARKS_KEPT frames
    session: SessionTurns
    ttfb_us: int | None
    duration_us: int | None

    @classmethod
    def read(
        cls, x: Exchange, queries: Queries, *, cells: int = 64, marks: int = MARKS_KEPT,
        keep: int | None = TURNS_KEPT,
    ) -> SessionTimeline:  # fmt: skip
        """The timeline of stored session ``x``, its frames counted in ``cells`` columns."""
        cells = max(1, cells)
        span_read = queries.event_span(x.id)
        end = max(x.duration_us or 0, span_read.last_offset_us or 0, x.ttfb_us or 0)
        span = end if end > 0 else 1000  # a session that took no time still needs an axis
        counts: dict[str, dict[str, list[int]]] = {lane: {} for lane in LANES}
        kept: list[FrameMark] | None = [] if span_read.count <= marks else None

        def each(m: SessionMessage, facts: MessageFacts) -> None:
            lane = LANES[0] if m.direction == Direction.CLIENT else LANES[1]
            kind = _kind(m, facts)
            row = counts[lane].get(kind)
            if row is None:
                row = counts[lane][kind] = [0] * cells
            row[min(cells - 1, max(0, m.offset_us * cells // span))] += 1
            if kept is not None and len(kept) < marks:
                kept.append(FrameMark(m.seq, m.offset_us, lane, kind, m.event or "", facts.turn))

        session = SessionTurns.read(TurnReads(queries.store), x, keep=keep, each=each)
        if kept is not None and len(kept) < session.client.frames + session.server.frames:
            kept = None  # frames came while it was read (a session in flight): counts only
        title = f"#{x.id} {x.method} {url_of(x)} {x.model or ''} {x.outcome or x.state}"
        return cls(title, span, cells, counts, kept, session, x.ttfb_us, x.duration_us)

    def lane_total(self, lane: str) -> int:
        s = self.session
        return (s.client if lane == LANES[0] else s.server).frames

    def cell_counts(self, lane: str) -> list[int]:
        """Frames per cell of one lane, all kinds."""
        rows = self.counts[lane].values()
        return [sum(col) for col in zip(*rows, strict=True)] if rows else [0] * self.cells

    def summary(self) -> str:
        s = self.session
        n = s.client.frames + s.server.frames
        parts = [
            f"{n:,} frame{'' if n == 1 else 's'} (client {s.client.frames:,}, server "
            f"{s.server.frames:,})",
            f"{s.total:,} turn{'' if s.total == 1 else 's'}",
        ]
        if s.audio_deltas:
            parts.append(f"{s.audio_deltas:,} audio frames (counted, not decoded)")
        if self.duration_us is not None:
            parts.append(f"duration {fmt_us(self.duration_us)}")
        return " · ".join(parts)


def turn_label(t: Turn) -> str:
    """A turn in one line, for a tooltip: ``turn 2: TTFT 82 ms, 330 ms, completed``."""
    parts = [f"turn {t.n} at {fmt_us(t.start_us)}"]
    if t.ttft_us is not None:
        parts.append(f"TTFT {fmt_us(t.ttft_us)}")
    if t.duration_us is not None:
        parts.append(f"duration {fmt_us(t.duration_us)}")
    if t.gap_max_us is not None:
        parts.append(f"longest gap {fmt_us(t.gap_max_us)}")
    outcome = f"{t.outcome or '-'}" + (f" ({t.reason})" if t.reason else "")
    return ", ".join([*parts, outcome])
