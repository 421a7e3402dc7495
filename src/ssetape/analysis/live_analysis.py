"""Stream knowledge computed while the recording process captures a stream.

Saving knowledge would otherwise read every event of a finished exchange back from the store
to analyse it, which was the recording process's largest single cost. Here the same
``Analyzer`` sees each event as ``Capture`` emits it, on its way to the writer, and
``Knowledge.save_live`` takes the finished analysis instead of re-reading. When the writer
had to drop events (the store was slow), the analysis still saw them all; ``ssetape reindex``
recomputes from what was stored.
"""

from __future__ import annotations

from array import array
from typing import Any

from ssetape.analysis.analyzer import Analysis, Analyzer
from ssetape.analysis.profiles import profile_or_none
from ssetape.analysis.sessions import SessionAnalyzer
from ssetape.records import ChunkRow, EventRow, EventSink
from ssetape.vocabulary import Transport

MAX_WAITING = 10_000  # finished analyses waiting for the writer to commit their exchange


def content_type(headers: list[list[str]] | None) -> str | None:
    for name, value in headers or ():
        if name.lower() == "content-type":
            return value
    return None


class LiveAnalysis:
    """An ``EventSink`` in front of the writer that also feeds one analyzer per exchange.

    Event rows reach the writer once per :meth:`flush` (the recording process calls it after
    each batch from the proxy), one call per exchange: a call per relayed chunk made the
    writer's queue the largest cost after SQLite itself.
    """

    def __init__(self, sink: EventSink) -> None:
        self._sink = sink
        self._rows: dict[str, list[EventRow]] = {}  # not yet handed to the writer
        self._analyzers: dict[str, Analyzer | SessionAnalyzer] = {}
        # What a WebSocket upgrade's session analysis is made from, once its 101 says so.
        self._upgrades: dict[str, dict[str, Any]] = {}
        self._heads: dict[str, tuple[int | None, str | None]] = {}
        # Finished analyses by uid; ``Knowledge.save_live`` (in the writer's thread) takes them once
        # the exchange's finish is committed. Single dict operations: safe across threads.
        # With each, its content events' offsets (the metrics' gaps, recording.stored).
        self._done: dict[str, tuple[Analysis, array[int]]] = {}

    def begin(self, uid: str, fields: dict[str, Any]) -> None:
        self._analyzers[uid] = Analyzer(
            method=fields["method"],
            path=fields["path"],
            request_body=fields["request_body"],
            profile=profile_or_none(fields.get("profile")),
        )
        headers = fields.get("request_headers") or ()
        if any(k.lower() == "upgrade" and v.lower() == "websocket" for k, v in headers):
            self._upgrades[uid] = fields

    def update(self, uid: str, fields: dict[str, Any]) -> None:
        self._hand_over(uid)
        begun = self._upgrades.get(uid)
        if begun is not None and fields.get("transport") == Transport.WEBSOCKET:
            self._analyzers[uid] = SessionAnalyzer(
                path=begun["path"],
                query=begun.get("query"),
                request_headers=begun.get("request_headers"),
                profile=profile_or_none(begun.get("profile")),
            )
        if "status" in fields:
            self._heads[uid] = (fields["status"], content_type(fields.get("response_headers")))
            analyzer = self._analyzers.get(uid)
            if analyzer is not None:
                analyzer.answered(fields["status"])

    def add_events(self, uid: str, rows: list[EventRow]) -> None:
        analyzer = self._analyzers.get(uid)
        if analyzer is not None:
            feed = analyzer.feed_row
            for seq, offset_us, event, data, _, raw in rows:
                feed(seq, offset_us, event, data, raw)
        waiting = self._rows.get(uid)
        if waiting is None:
            self._rows[uid] = rows
        else:
            waiting += rows

    def message(self, uid: str, seq: int, offset_us: int, direction: str, data: str | None) -> None:
        """One message of a WebSocket session (stored by ``WsSessions``, not through here)."""
        analyzer = self._analyzers.get(uid)
        if isinstance(analyzer, SessionAnalyzer):
            analyzer.message(seq, offset_us, direction, data)

    def flush(self) -> None:
        """Hand every waiting row to the writer."""
        rows, self._rows = self._rows, {}
        for uid, r in rows.items():
            self._sink.add_events(uid, r)

    def _hand_over(self, uid: str) -> None:
        """Before any other op of ``uid`` reaches the writer: its rows, in order."""
        rows = self._rows.pop(uid, None)
        if rows is not None:
            self._sink.add_events(uid, rows)

    def add_chunks(self, uid: str, rows: list[ChunkRow]) -> None:
        self._sink.add_chunks(uid, rows)

    def finish(self, uid: str, fields: dict[str, Any]) -> None:
        self._hand_over(uid)
        analyzer = self._analyzers.pop(uid, None)
        self._upgrades.pop(uid, None)
        status, ctype = self._heads.pop(uid, (None, None))
        if analyzer is not None:
            # Only the writer's thread takes them; one it never calls for (the store
            # dropped the exchange) must not pile up: the oldest go (reindex redoes them).
            while len(self._done) >= MAX_WAITING:
                self._done.pop(next(iter(self._done)))
            analysis = analyzer.finish(
                status=status,
                state=fields["state"],
                response_body=fields.get("response_body"),
                response_content_type=ctype,
                # What the recording process says it missed (worker.finish): a stream it
                # relayed whole but recorded in part was not cut by its provider.
                error=fields.get("error"),
                gap_seq=fields.get("gap_seq"),
            )
            self._done[uid] = analysis, analyzer.content_offsets

    def take(self, uid: str) -> Analysis | None:
        done = self._done.pop(uid, None)
        return done[0] if done is not None else None

    def take_timed(self, uid: str) -> tuple[Analysis, array[int]] | None:
        """Its analysis and its content events' offsets."""
        return self._done.pop(uid, None)
