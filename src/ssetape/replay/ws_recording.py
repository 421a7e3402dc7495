"""A recorded WebSocket session as its replay plays it: which client frame each server frame
answers, when it is due from that frame, and how the session ends.

Built once per recording from its stored messages (``storage.session_frames``, read a page at
a time), pure (no IO). It holds no server frame's payload past the first few (``head``: a
session's first frames are due as it opens, before any read could bring them): per frame only
its seq, offset, the client frame it answers and its lane (a few bytes each, in arrays), and
the player reads the payloads a page at a time as they come due (:mod:`ws_pages`). A client
frame's canonical form is kept while it is small (up to INLINE_BYTES of them), else only its
digest: an hour of client audio is compared by digests, and a miss reads the frame it missed.

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

import hashlib
from array import array
from collections.abc import Iterable, Sequence
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
    "UPGRADE",
    "ClientFrame",
    "End",
    "Ending",
    "WsRecording",
    "canonical_frame",
    "framed",
]

# Fields of a client frame that never count: ids a client makes up for its own events
# (OpenAI's ``event_id``), new on every run. ``--ignore-field`` adds to them.
FRAME_IGNORE = ("event_id",)
UPGRADE = -1  # the anchor of server frames sent before any client frame
# The APIs whose misses are answered by an `error` event (the others' by a close).
_OPENAI = frozenset({realtime.RULES.name, realtime.RESPONSES_WS.name})
# Client frames whose canonical form is kept (compared as parsed JSON, as ever): each up to
# INLINE_FRAME bytes, up to INLINE_BYTES in all; past them a frame is compared by digest.
INLINE_FRAME = 4 << 10
INLINE_BYTES = 1 << 20
# The first server frames, kept framed: due as the session opens, they wait for no read.
HEAD_ROWS = 64
HEAD_BYTES = 256 << 10
_DIGEST = 16  # bytes of a client frame's digest
_KEPT_COST = 4  # a kept canonical form's bytes, per byte of its payload (parsed objects)


class Ending(StrEnum):
    CLOSE = "close"  # the server closed with a code and reason
    CUT = "cut"  # the connection closed with no close frame
    CLIENT = "client"  # the client closed (or left): wait for it


@dataclass(frozen=True, slots=True)
class ClientFrame:
    index: int  # among the client frames, from 0
    seq: int
    offset_us: int
    canonical: Any  # what a live frame is compared with; None: not kept (compared by digest)
    lane: str | None  # its stream_id


@dataclass(frozen=True, slots=True)
class End:
    kind: Ending
    anchor: int
    delta_us: int
    code: int = 1000
    reason: str = ""


@dataclass(frozen=True, slots=True)
class WsRecording:
    """Frames are numbered from 0 among their side's (a server frame's number is what a
    fault's event=N counts); lanes by their index in ``lanes`` (0: no stream_id)."""

    id: int
    path: str
    ttfb_us: int  # when the 101 came, from the upgrade request
    headers: list[tuple[bytes, bytes]]  # the recorded 101's fields beside the handshake's
    subprotocol: str | None  # the one the upstream picked
    lanes: tuple[str | None, ...]
    client_seq: array[int]
    client_offset: array[int]
    client_lane: array[int]
    digests: bytes  # _DIGEST bytes a client frame
    kept: dict[int, Any]  # the client frames' canonical forms that are kept, by number
    server_seq: array[int]
    server_offset: array[int]
    server_anchor: array[int]  # the number of the client frame it answers; UPGRADE: none
    server_lane: array[int]
    server_size: array[int]  # payload bytes (what a page of them counts)
    head: tuple[bytes, ...]  # the first server frames, framed
    end: End
    api: str | None  # the session API's name (analysis.sessions), None: not one it knows
    error_events: bool  # a miss is answered by an `error` event (OpenAI), else a close 1008
    ignore: tuple[str, ...]  # the fields client frames were compared without
    size: int  # bytes held (what a cache counts)

    @classmethod
    def of(
        cls, head: SessionHead, rows: Iterable[FrameRow], ignore: Sequence[str] = ()
    ) -> WsRecording:
        """From the session's messages in seq order (each may be dropped once seen)."""
        drop = (*FRAME_IGNORE, *ignore)
        lanes: dict[str | None, int] = {None: 0}
        c_seq, c_off, c_lane = array("q"), array("q"), array("l")
        s_seq, s_off, s_anchor, s_lane, s_size = (array("q"), array("q"), array("l"),
                                                  array("l"), array("l"))  # fmt: skip
        digests = bytearray()
        kept: dict[int, Any] = {}
        kept_bytes = head_bytes = 0
        framed_head: list[bytes] = []
        latest: dict[int, int] = {}  # the latest client frame, by lane
        last = UPGRADE  # of any lane
        for seq, off, direction, opcode, raw in rows:
            binary = opcode == Opcode.BINARY
            if direction == Direction.CLIENT:
                canon = canonical_frame(binary, raw, drop)
                msg = canon["message"]
                sid = msg.get("stream_id") if isinstance(msg, dict) else None
                lane = lanes.setdefault(sid if isinstance(sid, str) else None, len(lanes))
                last = latest[lane] = len(c_seq)
                c_seq.append(seq)
                c_off.append(off)
                c_lane.append(lane)
                digests += digest(canon)
                if len(raw) <= INLINE_FRAME and kept_bytes + len(raw) <= INLINE_BYTES:
                    kept[last] = canon
                    kept_bytes += len(raw)
                continue
            sid = _stream_id(raw)
            lane = lanes.setdefault(sid, len(lanes))
            s_anchor.append(latest.get(lane, last) if sid is not None else last)
            s_seq.append(seq)
            s_off.append(off)
            s_lane.append(lane)
            s_size.append(len(raw))
            # A prefix of the frames: the first ones only, while they fit.
            fits = len(framed_head) < HEAD_ROWS and head_bytes + len(raw) <= HEAD_BYTES
            if fits and len(framed_head) == len(s_seq) - 1:
                framed_head.append(framed(binary, raw))
                head_bytes += len(raw)
        final = max([head.duration_us or 0, *s_off[-1:]])
        at = c_off[last] if last != UPGRADE else 0
        end = _end(head, last, max(final - at, 0))
        rules = session_rules(head.path)
        arrays = (c_seq, c_off, c_lane, s_seq, s_off, s_anchor, s_lane, s_size)
        held = sum(x.itemsize * len(x) for x in arrays) + len(digests)
        return cls(
            id=head.id,
            path=head.path,
            ttfb_us=head.ttfb_us or 0,
            headers=_headers(head),
            subprotocol=_recorded(head, "sec-websocket-protocol"),
            lanes=tuple(lanes),
            client_seq=c_seq,
            client_offset=c_off,
            client_lane=c_lane,
            digests=bytes(digests),
            kept=kept,
            server_seq=s_seq,
            server_offset=s_off,
            server_anchor=s_anchor,
            server_lane=s_lane,
            server_size=s_size,
            head=tuple(framed_head),
            end=end,
            api=rules.name if rules is not None else None,
            error_events=rules is not None and rules.name in _OPENAI,
            ignore=drop,
            size=held + head_bytes + _KEPT_COST * kept_bytes,
        )

    @property
    def clients(self) -> int:
        return len(self.client_seq)

    @property
    def servers(self) -> int:
        return len(self.server_seq)

    def client(self, i: int) -> ClientFrame:
        """Client frame ``i`` (its canonical form None if it is not kept)."""
        lane = self.lanes[self.client_lane[i]]
        return ClientFrame(i, self.client_seq[i], self.client_offset[i], self.kept.get(i), lane)

    def matches(self, i: int, got: dict[str, Any]) -> bool:
        """Whether a live frame's canonical form ``got`` is client frame ``i``'s."""
        canon = self.kept.get(i)
        if canon is not None:
            return bool(canon == got)
        return self.digests[i * _DIGEST : (i + 1) * _DIGEST] == digest(got)

    def delta_us(self, i: int) -> int:
        """Server frame ``i``'s recorded distance from the client frame it answers."""
        anchor = self.server_anchor[i]
        at = self.client_offset[anchor] if anchor != UPGRADE else 0
        return max(self.server_offset[i] - at, 0)

    def orders(self, side: str) -> dict[int, array[int]]:
        """The numbers of ``side``'s frames (Direction), by lane, in order: each lane's
        queue (a few bytes a frame, made once per replay)."""
        lanes = self.client_lane if side == Direction.CLIENT else self.server_lane
        out: dict[int, array[int]] = {}
        for i, lane in enumerate(lanes):
            found = out.get(lane)
            if found is None:
                found = out[lane] = array("l")
            found.append(i)
        return out

    def subprotocol_for(self, offered: Sequence[str]) -> str | None:
        """The subprotocol the 101 names: the recorded one if the client offers it (a client
        refuses one it did not offer), never a token that carries a key."""
        picked = self.subprotocol
        if picked is None or picked not in offered or "api-key" in picked.lower():
            return None
        return picked


def digest(canonical: Any) -> bytes:
    """What a client frame's canonical form is compared by when it is not kept: equal
    forms serialise alike (keys sorted), as requests' fingerprints do."""
    blob = orjson.dumps(canonical, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    return hashlib.blake2b(blob, digest_size=_DIGEST).digest()


def framed(binary: bool, payload: bytes) -> bytes:
    """A server frame as it is written."""
    return frame(BINARY if binary else TEXT, payload)


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
