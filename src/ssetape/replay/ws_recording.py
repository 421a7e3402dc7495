"""A recorded WebSocket session as its replay plays it: which client frame each server frame
answers, when it is due from that frame, and how the session ends.

Built once per recording from its stored messages (``storage.session_frames``), pure (no IO):

- Each server frame answers the latest client frame recorded before it, and is due at its
  recorded distance from that frame: a client that speaks later than it did when recorded
  still hears the answer at the recorded delay. Server frames before any client frame count
  from the upgrade request, as recorded.
- Responses WebSocket mode multiplexes responses on one socket by ``stream_id`` (a client's
  ``response.create`` names it, the server's events echo it): a server frame with a
  ``stream_id`` answers the latest client frame of the same ``stream_id``, and frames of one
  stream keep their order, not the streams among themselves. A recording without them is one
  stream.
- Client frames are compared by canonical JSON with the HTTP body rules
  (:func:`ssetape.matching.canonical_body`: key order and whitespace do not count, ignored
  fields are left out, masks compare key-free), and the client's own event ids never count.
- The end is the recorded one: a server close with its code and reason, a cut (the
  connection closed with no close frame), or else the client's own close, which is waited for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

from ssetape.analysis import realtime
from ssetape.analysis.session_rules import server_close
from ssetape.analysis.sessions import session_rules
from ssetape.framing.websocket import BINARY, TEXT, frame
from ssetape.http_fields import field_problem
from ssetape.matching import canonical_body
from ssetape.redactor import unmask
from ssetape.replay.playback import HOP_BY_HOP
from ssetape.storage.session_frames import FrameRow, SessionHead
from ssetape.vocabulary import Direction, ExchangeState, Opcode

__all__ = [
    "FRAME_IGNORE",
    "ClientFrame",
    "End",
    "Ending",
    "ServerFrame",
    "WsRecording",
    "canonical_frame",
]

# Fields of a client frame that never count: ids a client makes up for its own events
# (OpenAI's ``event_id``), new on every run. ``--ignore-field`` adds to them.
FRAME_IGNORE = ("event_id",)
UPGRADE = -1  # the anchor of server frames sent before any client frame
# The APIs whose misses are answered by an `error` event (the others' by a close).
_OPENAI = frozenset({realtime.RULES.name, realtime.RESPONSES_WS.name})


class Ending(StrEnum):
    CLOSE = "close"  # the server closed with a code and reason
    CUT = "cut"  # the connection closed with no close frame
    CLIENT = "client"  # the client closed (or left): wait for it


@dataclass(frozen=True, slots=True)
class ClientFrame:
    index: int  # among the client frames, from 0
    seq: int
    offset_us: int
    canonical: Any  # what a live frame is compared with
    lane: str | None  # its stream_id


@dataclass(frozen=True, slots=True)
class ServerFrame:
    index: int  # among the server frames, from 0: what a fault's event=N counts
    seq: int
    offset_us: int
    anchor: int  # the index of the client frame it answers; UPGRADE: none
    delta_us: int  # its offset from its anchor's
    lane: str | None  # frames of one lane keep their order
    framed: bytes  # written as it is when due


@dataclass(frozen=True, slots=True)
class End:
    kind: Ending
    anchor: int
    delta_us: int
    code: int = 1000
    reason: str = ""


@dataclass(frozen=True, slots=True)
class WsRecording:
    id: int
    path: str
    ttfb_us: int  # when the 101 came, from the upgrade request
    headers: list[tuple[bytes, bytes]]  # the recorded 101's fields beside the handshake's
    subprotocol: str | None  # the one the upstream picked
    clients: tuple[ClientFrame, ...]
    servers: tuple[ServerFrame, ...]
    end: End
    api: str | None  # the session API's name (analysis.sessions), None: not one it knows
    error_events: bool  # a miss is answered by an `error` event (OpenAI), else a close 1008
    ignore: tuple[str, ...]  # the fields client frames were compared without
    size: int  # bytes held (what a cache counts)

    @classmethod
    def of(
        cls, head: SessionHead, rows: Sequence[FrameRow], ignore: Sequence[str] = ()
    ) -> WsRecording:
        drop = (*FRAME_IGNORE, *ignore)
        clients: list[ClientFrame] = []
        servers: list[ServerFrame] = []
        latest: dict[str | None, ClientFrame] = {}  # the latest client frame, by lane
        last: ClientFrame | None = None  # of any lane
        for seq, off, direction, opcode, raw in rows:
            binary = opcode == Opcode.BINARY
            if direction == Direction.CLIENT:
                canon = canonical_frame(binary, raw, drop)
                msg = canon["message"]
                lane = msg.get("stream_id") if isinstance(msg, dict) else None
                c = ClientFrame(
                    len(clients), seq, off, canon, lane if isinstance(lane, str) else None
                )
                clients.append(c)
                latest[c.lane] = last = c
                continue
            lane = _stream_id(raw)
            anchor = latest.get(lane, last) if lane is not None else last
            at = anchor.offset_us if anchor is not None else 0
            servers.append(ServerFrame(
                len(servers), seq, off, anchor.index if anchor is not None else UPGRADE,
                max(off - at, 0), lane, frame(BINARY if binary else TEXT, raw),
            ))  # fmt: skip
        final = max([head.duration_us or 0, *(s.offset_us for s in servers[-1:])])
        at = last.offset_us if last is not None else 0
        end = _end(head, last.index if last is not None else UPGRADE, max(final - at, 0))
        rules = session_rules(head.path)
        return cls(
            id=head.id,
            path=head.path,
            ttfb_us=head.ttfb_us or 0,
            headers=_headers(head),
            subprotocol=_recorded(head, "sec-websocket-protocol"),
            clients=tuple(clients),
            servers=tuple(servers),
            end=end,
            api=rules.name if rules is not None else None,
            error_events=rules is not None and rules.name in _OPENAI,
            ignore=drop,
            size=sum(len(r.raw) for r in rows) * 2,  # payloads, and the framed copies
        )

    def subprotocol_for(self, offered: Sequence[str]) -> str | None:
        """The subprotocol the 101 names: the recorded one if the client offers it (a client
        refuses one it did not offer), never a token that carries a key."""
        picked = self.subprotocol
        if picked is None or picked not in offered or "api-key" in picked.lower():
            return None
        return picked


def canonical_frame(binary: bool, payload: bytes, ignore: Sequence[str]) -> dict[str, Any]:
    """A client frame as frames are compared: its opcode and its canonical message."""
    message = unmask(canonical_body(payload, ignore))
    return {"opcode": "binary" if binary else "text", "message": message}


def _stream_id(raw: bytes) -> str | None:
    """A server frame's ``stream_id`` (parsed only where it can be)."""
    if raw[:1] != b"{" or b'"stream_id"' not in raw:
        return None
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    sid = doc.get("stream_id") if isinstance(doc, dict) else None
    return sid if isinstance(sid, str) else None


def _end(head: SessionHead, anchor: int, delta_us: int) -> End:
    if head.state == ExchangeState.TRUNCATED:
        return End(Ending.CUT, anchor, delta_us)
    said = server_close(head.error) if head.state == ExchangeState.COMPLETED else None
    if said is not None:  # 1000 and 1001 too: the server ended it, not the client
        return End(Ending.CLOSE, anchor, delta_us, *said)
    return End(Ending.CLIENT, anchor, delta_us)


def _recorded(head: SessionHead, name: str) -> str | None:
    for pair in head.response_headers or ():
        if len(pair) == 2 and str(pair[0]).lower() == name:
            return str(pair[1]).strip() or None
    return None


def _headers(head: SessionHead) -> list[tuple[bytes, bytes]]:
    """The recorded 101's fields that say something beside the handshake (which wsproto
    writes for the client's key), those that are header lines."""
    out: list[tuple[bytes, bytes]] = []
    for pair in head.response_headers or ():
        if not isinstance(pair, list | tuple) or len(pair) != 2:
            continue
        name, value = str(pair[0]), str(pair[1])
        low = name.lower()
        if low in HOP_BY_HOP or low.startswith("sec-websocket-") or field_problem(name, value):
            continue
        out.append(
            (name.encode("utf-8", "surrogateescape"), value.encode("utf-8", "surrogateescape"))
        )
    return out
