"""Which stored events carry content: the events that TTFT and every gap are measured on.

This is the one definition of a gap that every surface reads (``show``, the timeline and its
SVG, the web viewer, MCP's exchanges and stall finder, the pytest plugin's assertions): a gap
is the time between two consecutive events that carried content (text, reasoning, refusal,
tool-call arguments, an image). Keep-alives carry none (``: keep-alive`` comments, Anthropic's
``ping``), nor do set-up events (``message_start``, a chat chunk with only a role) or the
terminal ones: a 1.5 s pause filled with comments every 0.5 s is one 1.5 s gap, not three of
0.5 s. TTFT is the offset of the first such event. The stored figures (``gap_*_us``,
``ttft_us``) come from the analysis itself, so this module asks the analysis too, event by
event, rather than guessing by event name.

A WebSocket session's content events are its server frames that carried content, as the
session analysis read them (:mod:`ssetape.analysis.turns`); its gaps are measured within a
turn only, never across the silence between two (:meth:`ContentEvents.stored_gaps`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import NamedTuple

from ssetape.analysis.analyzer import Analyzer
from ssetape.analysis.apis import streams_array
from ssetape.analysis.live_analysis import content_type
from ssetape.analysis.profiles import Profile, profile_for, profile_or_none
from ssetape.analysis.turns import TurnScan
from ssetape.framing.framings import Framing, framing_of
from ssetape.storage.models import Exchange
from ssetape.storage.queries import Queries
from ssetape.storage.turns import TurnReads
from ssetape.vocabulary import Transport

__all__ = ["ContentEvents", "Gap", "StoredEvent"]


class StoredEvent(NamedTuple):
    """One stored event and whether it carried content."""

    seq: int
    offset_us: int
    event: str | None
    data: str | None
    content: bool
    turn: int | None = None  # a session's server frame: the turn it belongs to


class Gap(NamedTuple):
    """The time between two consecutive content events."""

    us: int
    before_seq: int  # the content event the pause followed
    seq: int  # the content event that ended it
    offset_us: int  # of ``seq``


class _Scan(Analyzer):
    """The analysis, telling after each row whether that row carried content."""

    carried = False

    def _feed(self, seq: int, event: str | None, data: str) -> bool:
        carried = super()._feed(seq, event, data)
        self.carried = self.carried or carried
        return carried


class ContentEvents:
    """Reads one exchange's events as the analysis reads them (events where a framing cut
    them; the wire chunks of a JSON-array stream) and says which carried content."""

    def __init__(
        self,
        *,
        method: str,
        path: str,
        request_body: bytes | None,
        status: int | None,
        profile: Profile | None,
        array: bool = False,
    ) -> None:
        self._scan = _Scan(method=method, path=path, request_body=request_body, profile=profile)
        self._scan.answered(status)
        self.array = array  # the rows' raw bytes are what is read

    @classmethod
    def of(cls, x: Exchange) -> ContentEvents:
        """For a stored exchange, under the profile it was analysed with."""
        if x.transport == Transport.WEBSOCKET:
            return _SessionContent(x)
        array = framing_of(content_type(x.response_headers)) is Framing.CHUNKS and streams_array(
            x.path
        )
        profile = profile_or_none(x.profile) or profile_for(x.host)
        return cls(
            method=x.method, path=x.path, request_body=x.request_body, status=x.status,
            profile=profile, array=array,
        )  # fmt: skip

    def carried(
        self, seq: int, offset_us: int, event: str | None, data: str | None, raw: bytes = b"",
        direction: str | None = None,
    ) -> bool:  # fmt: skip
        """Whether this row (fed in order) carried content (``direction``: a session's)."""
        scan = self._scan
        scan.carried = False
        if self.array:
            scan.feed_raw(seq, offset_us, raw)
        elif data is not None:
            scan.feed(seq, offset_us, event, data)
        return scan.carried

    @classmethod
    def read(cls, queries: Queries, x: Exchange) -> Iterator[StoredEvent]:
        """Every stored event of ``x`` with whether it carried content, a page at a time."""
        if x.transport == Transport.WEBSOCKET:
            scan = TurnScan.of(x, keep=0)
            for m in TurnReads(queries.store).messages(x.id):
                facts = scan.message(m.seq, m.offset_us, m.direction, m.data, event=m.event)
                yield StoredEvent(m.seq, m.offset_us, m.event, m.data, facts.carried, facts.turn)
            return
        reader = cls.of(x)
        if reader.array:
            for seq, off, event, data, raw in queries.event_rows(x.id):
                yield StoredEvent(seq, off, event, data, reader.carried(seq, off, event, data, raw))
        else:
            for seq, off, event, data in queries.timing_rows(x.id):
                yield StoredEvent(seq, off, event, data, reader.carried(seq, off, event, data))

    @staticmethod
    def gaps(events: Iterable[tuple[int, int, bool]]) -> Iterator[Gap]:
        """The gaps between consecutive content events of (seq, offset_us, content) rows."""
        before: tuple[int, int] | None = None
        for seq, offset_us, content in events:
            if not content:
                continue
            if before is not None:
                yield Gap(offset_us - before[1], before[0], seq, offset_us)
            before = (seq, offset_us)

    @classmethod
    def stored_gaps(cls, queries: Queries, x: Exchange) -> Iterator[Gap]:
        """The gaps of stored exchange ``x`` as its figures count them: a session's within
        each turn (the first content of a turn follows no gap)."""
        before: tuple[int, int, int | None] | None = None
        for e in cls.read(queries, x):
            if not e.content:
                continue
            if before is not None and before[2] == e.turn:
                yield Gap(e.offset_us - before[1], before[0], e.seq, e.offset_us)
            before = (e.seq, e.offset_us, e.turn)


class _SessionContent(ContentEvents):
    """Which messages of a WebSocket session carried content, fed in order."""

    def __init__(self, x: Exchange) -> None:
        self._turns = TurnScan.of(x, keep=0)
        self.array = False

    def carried(
        self, seq: int, offset_us: int, event: str | None, data: str | None, raw: bytes = b"",
        direction: str | None = None,
    ) -> bool:  # fmt: skip
        """Whether this message carried content (``direction`` None: read as the server's)."""
        facts = self._turns.message(seq, offset_us, direction, data, event=event)
        return facts.carried
