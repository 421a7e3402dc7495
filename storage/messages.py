"""WebSocket messages into the writer: event rows that carry a direction and an opcode.

They travel as the events of an HTTP stream do (the same op, queue, ledger and counts, the
same table), only with two more columns (``batch._event_rows`` tells them apart); this is
their door into the writer, kept out of ``storage.writer`` (at its size bound).
"""

from __future__ import annotations

from ssetape.records import MessageRow
from ssetape.storage.batch import EVENTS_OP
from ssetape.storage.writer import Writer

__all__ = ["add_messages"]


def add_messages(writer: Writer, uid: str, rows: list[MessageRow]) -> None:
    """Queue one session's messages (any thread, never blocks, as ``Writer.add_events``)."""
    if rows:
        writer._put(EVENTS_OP, uid, rows, len(rows))
