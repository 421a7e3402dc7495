"""mitmproxy addon that records WebSocket sessions: each message as an event of its exchange.

The recorder stores a session's upgrade (its request and 101) as any exchange; this addon,
loaded just before it, keeps that exchange open past the 101 (mitmproxy's ``response`` hook
would end it there), hands every message to the recording process as it is relayed (who sent
it, text or binary, its exact payload, its offset from the upgrade request) and ends the
exchange with the session: closed by the client, closed by the server (with its code and
reason), or cut (the TCP connection closed without a close frame).

mitmproxy keeps every message of a session in ``flow.websocket.messages``: each is dropped
once handed over, so a session of hours holds no more than its last message.
"""

from __future__ import annotations

import logging
from typing import Any

from mitmproxy import http

from ssetape.addons.recorder import META, SESSION_META, Recorder
from ssetape.analysis.session_rules import close_note
from ssetape.recording import clock
from ssetape.recording.link import RecordLink
from ssetape.recording.ws_link import hand_message
from ssetape.vocabulary import Direction, ExchangeState, Opcode, Transport

__all__ = ["SESSION_META", "WebSockets", "ending"]

log = logging.getLogger("ssetape.recorder")

ABNORMAL = 1006  # what mitmproxy (wsproto) reports when TCP closed with no close frame
STOPPED = "recorder stopped before the WebSocket session ended"


def ending(by_client: bool | None, code: int | None, reason: str | None) -> tuple[str, str | None]:
    """The exchange's state and error text for a session that ended so. A server's close
    keeps its code and reason, 1000/1001 too (a note nothing reads as an error): the replay
    closes where the server did, not where a client would."""
    if code == ABNORMAL or code is None:
        who = "client" if by_client else "server"
        cut = f"the {who} closed the connection without a WebSocket close frame"
        return (ExchangeState.ABORTED if by_client else ExchangeState.TRUNCATED), cut
    if by_client:
        return ExchangeState.COMPLETED, None
    return ExchangeState.COMPLETED, close_note(code, reason)


class WebSockets:
    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        # Sessions being recorded, by flow id: their flow and the link they began on (a new
        # store mid-session gets none of the rest: its recording process never saw it begin).
        # The recorder may end one itself (a drain's deadline, a store change): its entry in
        # the flow's metadata is gone then, and so is what this addon does with the session.
        self.open: dict[str, tuple[http.HTTPFlow, RecordLink]] = {}

    def response(self, flow: http.HTTPFlow) -> None:
        """Before the recorder's: a 101 that mitmproxy upgrades stays open (``flow.websocket``
        is set before this hook exactly so that addons can tell)."""
        link = self.recorder.link
        if flow.websocket is None or link is None or META not in flow.metadata:
            return
        meta: dict[str, Any] = flow.metadata.pop(META)
        flow.metadata[SESSION_META] = meta
        self.open[flow.id] = (flow, link)
        link.update(meta["uid"], {"transport": Transport.WEBSOCKET})

    def websocket_message(self, flow: http.HTTPFlow) -> None:
        meta = flow.metadata.get(SESSION_META)
        ws = flow.websocket
        if ws is None or not ws.messages:
            return
        if meta is None:  # not recorded, or ended by the recorder: only trimmed
            self.open.pop(flow.id, None)
            del ws.messages[:-1]
            return
        message = ws.messages[-1]
        link = self._link(flow.id)
        if link is not None:
            try:
                hand_message(
                    link,
                    meta["uid"],
                    clock.since(meta["t0"]),
                    Direction.CLIENT if message.from_client else Direction.SERVER,
                    Opcode.TEXT if message.is_text else Opcode.BINARY,
                    message.content,
                )
            except Exception:  # never let a recording bug touch the traffic
                log.exception("ssetape: cannot record a WebSocket message; traffic continues")
        # The layer relays ``message`` itself, not the list: the last one stays for the
        # addons after this one, the rest would only grow with the session.
        del ws.messages[:-1]

    def websocket_end(self, flow: http.HTTPFlow) -> None:
        ws = flow.websocket
        if ws is None:
            return
        state, error = ending(ws.closed_by_client, ws.close_code, ws.close_reason)
        self._finish(flow, state, error)

    def done(self) -> None:
        """Before the recorder's: sessions still open end as interrupted while its link
        still takes them."""
        for flow, _ in list(self.open.values()):
            self._finish(flow, ExchangeState.INTERRUPTED, STOPPED)

    def _link(self, flow_id: str) -> RecordLink | None:
        got = self.open.get(flow_id)
        return got[1] if got is not None and got[1] is self.recorder.link else None

    def _finish(self, flow: http.HTTPFlow, state: str, error: str | None) -> None:
        link = self._link(flow.id)
        self.open.pop(flow.id, None)
        meta = flow.metadata.pop(SESSION_META, None)
        if meta is None:
            return
        uid = meta["uid"]
        self.recorder.inflight.pop(uid, None)
        if link is None:
            return
        now = clock.since(meta["t0"])
        link.finish(uid, now, {"state": state, "error": error, "duration_us": now})
