"""WebSocket sessions in a cassette (format version 3): what a session's lines may hold.

A session is an exchange line with ``"transport": "websocket"`` (its upgrade request and 101
response, redacted as any exchange's) followed by one event line per message, in the order
they were relayed::

    {"kind": "event", "seq": 0, "offset_us": 13330, "direction": "server", "opcode": "text",
     "raw": "{\\"type\\":\\"session.created\\", ...}"}
    {"kind": "event", "seq": 1, "offset_us": 416327, "direction": "client", "opcode": "binary",
     "raw": {"b64": "eyJzZXR1cCI6..."}}

A text frame's payload is text, a binary frame's base64, whatever it holds. How the session
ended is its exchange's, as recorded: ``state`` (``truncated``: the server cut the connection
without a close frame), and ``error``, where a server close other than 1000/1001 stands with
its code and reason (``"the server closed the WebSocket session: 1011 upstream overloaded"``).

Version 3 is written only by an export that holds a session, so a cassette without one is
the version-2 file it always was; a version-2 reader refuses version 3 (it would take the
messages for an HTTP stream's events). :class:`SessionLines` holds a cassette's session lines
to what the recorder stores and replay relies on; each check raises CassetteError naming the
line, and the message fields the recorder derives (``event``, ``data``) are derived alike.
"""

from __future__ import annotations

import re
from typing import Any

from ssetape.analysis.session_rules import close_of
from ssetape.cassettes.codec import CassetteError, short
from ssetape.recording.protocol import WsMessage
from ssetape.recording.ws_sessions import message_row
from ssetape.vocabulary import Opcode, Transport

__all__ = ["HTTP_VERSION", "SESSIONS_VERSION", "SessionLines", "message_fields"]

HTTP_VERSION = 2  # what a cassette without a WebSocket session is written as
SESSIONS_VERSION = 3  # with one
_SWITCHING = 101
# Close codes a close frame may carry, as the clients' `websockets` library accepts them
# (RFC 6455 7.4): 1004-1006 and 1015 are reserved for reports and never sent, the rest of
# 1000-2999 is unassigned; 3000-4999 are the registered and private ones.
_SENT = frozenset({1000, 1001, 1002, 1003, *range(1007, 1015), *range(3000, 5000)})
_CLOSE = re.compile(r"([0-9]{4})(?: (.*))?", re.DOTALL)  # ASCII: \d takes any script's digits
_MAX_REASON = 123  # bytes: a close frame's payload is 125 at most, 2 of them the code


def message_fields(values: dict[str, Any]) -> dict[str, Any]:
    """``event``, ``data`` and ``sse_id`` of a message line, derived from its payload as the
    recorder derives them (``recording.ws_sessions``): a cassette does not carry them, and
    what one says of them is not taken."""
    msg = WsMessage("", values["offset_us"], values["direction"], values["opcode"], values["raw"])
    row = message_row(values["seq"], msg)
    return {"event": row[2], "data": row[3], "sse_id": row[4]}


def _close_problem(error: str | None) -> str | None:
    note = close_of(error)
    if note is None:
        return None
    m = _CLOSE.fullmatch(note)
    if m is None:
        return f"names no close code ({short(note)})"
    code = int(m.group(1))
    if code not in _SENT:
        return f"names close code {code}, which no close frame carries"
    if len((m.group(2) or "").encode()) > _MAX_REASON:
        return f"has a close reason longer than {_MAX_REASON} bytes"
    return None


class SessionLines:
    """The checks of one cassette's session lines, fed line by line in order."""

    def __init__(self) -> None:
        self.session = False  # whether the exchange being read is a WebSocket session
        self.last_offset = 0

    def exchange(self, where: str, values: dict[str, Any]) -> None:
        self.session = values.get("transport") == Transport.WEBSOCKET
        self.last_offset = 0
        if not self.session:
            return
        if values.get("status") != _SWITCHING:
            raise CassetteError(
                f"{where}: a WebSocket session's status must be 101, "
                f"not {short(values.get('status'))}"
            )
        wrong = _close_problem(values.get("error"))
        if wrong is not None:
            raise CassetteError(f"{where}: the session's 'error' {wrong}")

    def event(self, where: str, values: dict[str, Any]) -> bool:
        """A session's message (True, its fields derived), or an HTTP stream's event (False:
        it carries neither a direction nor an opcode)."""
        said = [k for k in ("direction", "opcode") if values.get(k) is not None]
        if not self.session:
            if said:
                raise CassetteError(
                    f"{where}: {said[0]!r} belongs to a WebSocket message, and this event's "
                    'exchange is not a session ("transport": "websocket")'
                )
            return False
        if len(said) < 2:
            missing = " and ".join(repr(k) for k in ("direction", "opcode") if k not in said)
            raise CassetteError(f"{where}: a WebSocket message needs {missing}")
        offset = values["offset_us"]
        if offset < self.last_offset:
            raise CassetteError(
                f"{where}: offset_us {offset} is before the previous message's "
                f"({self.last_offset}): a session's messages are in the order relayed"
            )
        self.last_offset = offset
        if values["opcode"] == Opcode.TEXT:
            try:
                values["raw"].decode("utf-8")
            except UnicodeDecodeError:
                raise CassetteError(
                    f"{where}: a text message's payload must be UTF-8 (a binary one is "
                    '"opcode": "binary")'
                ) from None
        values.update(message_fields(values))
        return True

    def chunk(self, where: str) -> None:
        if self.session:
            raise CassetteError(
                f"{where}: a WebSocket session has no chunk lines (its messages are event lines)"
            )
