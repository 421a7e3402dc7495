"""The recording process's side of WebSocket sessions: each message becomes one event row.

A row keeps the message's exact payload (``raw``), who sent it and its opcode; ``data`` is the
payload as text when it is UTF-8 (binary frames that hold JSON, as Gemini Live sends, are
searchable and readable too) and ``event`` the JSON ``type`` (OpenAI) or first member name
(Gemini: ``setupComplete``, ``serverContent``), so ``show`` lists them as it lists SSE events.
"""

from __future__ import annotations

import orjson

from ssetape.analysis.live_analysis import LiveAnalysis
from ssetape.recording.protocol import WsMessage
from ssetape.records import MessageRow
from ssetape.storage.ledger import Ledger
from ssetape.storage.messages import add_messages
from ssetape.storage.writer import Writer

__all__ = ["WsSessions", "message_row"]

_LABEL = 200  # characters of an event label, at most


def message_row(seq: int, msg: WsMessage) -> MessageRow:
    data = msg.data
    try:
        text: str | None = data.decode()
    except UnicodeDecodeError:
        text = None
    label = None
    if text is not None and data[:1] == b"{":
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            obj = None
        if isinstance(obj, dict):
            kind = obj.get("type")
            label = kind if isinstance(kind, str) else next(iter(obj), None)
    return (seq, msg.offset_us, label[:_LABEL] if label else None, text, None, data,
            msg.direction, msg.opcode)  # fmt: skip


class WsSessions:
    """Numbers each session's messages and hands them to the writer, in order."""

    def __init__(self, writer: Writer, ledger: Ledger, live: LiveAnalysis) -> None:
        self._writer = writer
        self._ledger = ledger
        self._live = live  # each session is analysed as its messages go by
        self._next: dict[str, int] = {}  # the next seq, per session

    def message(self, msg: WsMessage, open_: set[str]) -> None:
        if msg.uid not in open_:  # begun in a recording process that died: not stored
            self._ledger.not_stored(1)
            return
        seq = self._next.get(msg.uid, 0)
        self._next[msg.uid] = seq + 1
        row = message_row(seq, msg)
        self._live.message(msg.uid, seq, msg.offset_us, msg.direction, row[3])
        add_messages(self._writer, msg.uid, [row])

    def finish(self, uid: str) -> None:
        self._next.pop(uid, None)
