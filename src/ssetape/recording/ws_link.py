"""WebSocket messages onto the recording link: one typed message each (``WsMessage``).

A message goes as a relayed chunk does (``RecordLink.chunk``): into the link's batch, never
blocking; past the link's buffer bound it is dropped and counted lost, so a session the
recording process cannot keep up with never slows. It lives here rather than in
``recording.link``, which is at its size bound, and so reaches into the link's batch.
"""

from __future__ import annotations

from ssetape.recording.link import FLUSH_BYTES, RecordLink
from ssetape.recording.protocol import WsMessage

__all__ = ["hand_message"]


def hand_message(
    link: RecordLink, uid: str, offset: int, direction: str, opcode: str, data: bytes
) -> None:
    """One message of session ``uid``, ``offset`` µs after its upgrade request (on the loop)."""
    if len(link._out) > link._max_buffer or uid in link._losses.orphans:
        link._losses.count(events=1)
        link._schedule()  # the count goes out with the next batch
        return
    link._batch.append(WsMessage(uid, offset, direction, opcode, data))
    link._batch_bytes += len(data)
    # One stored event: if the recording process dies with it, it is counted lost.
    link._batch_events[uid] = link._batch_events.get(uid, 0) + 1
    if link._timer is None:
        link._schedule()
    elif link._batch_bytes > FLUSH_BYTES:
        link.flush()
