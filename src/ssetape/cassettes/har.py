"""HAR 1.2 export: recorded exchanges for browser dev tools and other HAR viewers.

HAR has no notion of events arriving over time, so every entry carries them in a custom
``_ssetape`` field (custom fields start with an underscore in HAR 1.2): a list of
``{"seq", "offset_us", "event", "data"}``, offsets in microseconds from the moment the proxy had
the whole request. Bodies are decoded (content-encoding undone) as HAR wants them; text that is
not UTF-8 is base64 with ``"encoding": "base64"``. Lossy by nature: use cassettes to round-trip.

A WebSocket session is one entry (its upgrade, status 101) whose messages are in
``_webSocketMessages`` as Chrome's dev tools write them (``_resourceType: "websocket"``; each
message ``{"type": "send"|"receive", "time": <Unix seconds>, "opcode": 1|2, "data": ...}``,
a binary frame's data in base64), which HAR viewers show as a session's frames.
"""

from __future__ import annotations

import base64
import codecs
import importlib.metadata
import secrets
from pathlib import Path
from typing import IO, Any
from urllib.parse import parse_qsl

import orjson

from ssetape.cassettes.codec import CassetteError
from ssetape.cassettes.store_io import Progress, scrubber
from ssetape.files import private_file
from ssetape.framing.decoders import decode
from ssetape.http_fields import origin
from ssetape.storage.cassette_rows import CassetteRows, Narrow
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from ssetape.vocabulary import Direction, Opcode, Transport

_BATCH = 200
_BATCH_EVENTS = 50_000  # events of one batch read at once, at most


def _header(headers: list[list[str]] | None, name: str) -> str:
    return next((v for k, v in headers or [] if k.lower() == name), "")


def _content(data: bytes, mime: str) -> dict[str, Any]:
    try:
        return {"size": len(data), "mimeType": mime, "text": data.decode("utf-8")}
    except UnicodeDecodeError:
        text = base64.b64encode(data).decode("ascii")
        return {"size": len(data), "mimeType": mime, "text": text, "encoding": "base64"}


# A HAR holds bodies decoded; one that inflates past this is exported as it came instead.
MAX_DECODED = 64 << 20


def _decoded(data: bytes, encoding: str) -> tuple[bytes, str | None]:
    """The body decoded, or as it came and why (cut mid-stream, or a decompression bomb)."""
    try:
        return decode(data, encoding, MAX_DECODED), None
    except ValueError as e:
        return data, f"{encoding} body exported as it came ({e})"


def _ms(us: int | None) -> float:
    return round(us / 1000, 3) if us is not None else -1


def _frame(started: float, e: dict[str, Any]) -> dict[str, Any]:
    """One WebSocket message as Chrome's HAR has it (``started``: the session's, Unix s)."""
    binary = e["opcode"] == Opcode.BINARY
    raw: bytes = e["raw"]
    return {
        "type": "send" if e["direction"] == Direction.CLIENT else "receive",
        "time": round(started + e["offset_us"] / 1e6, 6),
        "opcode": 2 if binary else 1,
        "data": base64.b64encode(raw).decode("ascii") if binary else raw.decode("utf-8", "replace"),
    }


def _event(e: dict[str, Any]) -> dict[str, Any]:
    item = {"seq": e["seq"], "offset_us": e["offset_us"], "event": e["event"], "data": e["data"]}
    return item if e.get("direction") is None else {**item, "direction": e["direction"]}


class Har:
    """Builds HAR 1.2 documents from a store, one entry per exchange, oldest first."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.queries = Queries(store)
        self._scrub = scrubber(store)

    def entry(self, x: dict[str, Any], events: list[dict[str, Any]]) -> dict[str, Any]:
        x = self._scrub(dict(x))
        query = x["query"] or ""
        url = origin(x["scheme"], x["host"], x["port"]) + x["path"] + (f"?{query}" if query else "")
        req_headers = x["request_headers"] or []
        resp_headers = x["response_headers"] or []
        request: dict[str, Any] = {
            "method": x["method"],
            "url": url,
            "httpVersion": x["http_version"],
            "cookies": [],
            "headers": [{"name": k, "value": v} for k, v in req_headers],
            "queryString": [
                {"name": k, "value": v} for k, v in parse_qsl(query, keep_blank_values=True)
            ],
            "headersSize": -1,
            "bodySize": len(x["request_body"] or b""),
        }
        if x["request_body"]:
            post = _content(x["request_body"], _header(req_headers, "content-type"))
            request["postData"] = {
                "mimeType": post["mimeType"],
                "text": post["text"],
                **({"_encoding": "base64"} if "encoding" in post else {}),
            }
        comment_extra: list[str] = []
        session = x.get("transport") == Transport.WEBSOCKET
        if session:
            body = b""  # its messages are frames, not a body
        elif x["is_stream"]:
            # Events hold the decoded stream, byte-exact; wire chunks may be compressed.
            body = b"".join(e["raw"] for e in events)
        else:
            encoding = _header(resp_headers, "content-encoding")
            body, not_decoded = _decoded(x["response_body"] or b"", encoding)
            if not_decoded is not None:
                comment_extra.append(not_decoded)
        ttfb, duration = x["ttfb_us"], x["duration_us"]
        receive = max(0, (duration or 0) - (ttfb or 0)) if ttfb is not None else 0
        comment = f"ssetape exchange {x['uid']}: {x['state']}"
        if x["error"]:
            comment += f" ({x['error']})"
        comment += "".join(f"; {c}" for c in comment_extra)
        started = x["started_at"].timestamp()
        frames = (
            {
                "_resourceType": "websocket",
                "_webSocketMessages": [_frame(started, e) for e in events],
            }
            if session
            else {}
        )
        return {
            "startedDateTime": x["started_at"].isoformat(),
            "time": _ms(duration if duration is not None else (ttfb or 0)),
            "request": request,
            "response": {
                "status": x["status"] or 0,
                "statusText": x["reason"] or "",
                "httpVersion": x["http_version"],
                "cookies": [],
                "headers": [{"name": k, "value": v} for k, v in resp_headers],
                "content": _content(body, _header(resp_headers, "content-type")),
                "redirectURL": _header(resp_headers, "location"),
                "headersSize": -1,
                "bodySize": -1 if x["status"] is None else len(body),
            },
            "cache": {},
            "timings": {
                "blocked": -1,
                "dns": -1,
                "connect": -1,
                "ssl": -1,
                "send": 0,
                "wait": max(0.0, _ms(ttfb)),
                "receive": _ms(receive),
            },
            "comment": comment,
            **frames,
            "_ssetape": [_event(e) for e in events],
        }

    def write(
        self, out: IO[bytes], narrow: Narrow | None = None, *, progress: Progress | None = None
    ) -> int:
        """Stream one HAR document to ``out`` (entries one by one); returns the entry count."""
        try:
            version = importlib.metadata.version("ssetape")
        except importlib.metadata.PackageNotFoundError:
            version = "0"
        log = {"version": "1.2", "creator": {"name": "ssetape", "version": version}}
        out.write(b'{"log":' + orjson.dumps(log)[:-1] + b',"entries":[\n')
        # A batch of exchanges at a time; their short streams read together, a long one
        # (or one past the batch's budget) apart, a page at a time, as it is written.
        reads = CassetteRows(self.store, together=_BATCH_EVENTS)
        ids = reads.ids(narrow, "time")
        first = True
        for start in range(0, len(ids), _BATCH):
            batch = ids[start : start + _BATCH]
            rows = reads.exchanges(batch)
            present = [xid for xid in batch if xid in rows]
            for xid, events in reads.children("event", present):
                if not first:
                    out.write(b",\n")
                first = False
                try:
                    if events is not None or not rows[xid]["is_stream"]:
                        out.write(orjson.dumps(self.entry(rows[xid], events or [])))
                    elif rows[xid].get("transport") == Transport.WEBSOCKET:
                        self._write_long_session(out, rows[xid], reads)
                    else:
                        self._write_long(out, rows[xid])
                except orjson.JSONEncodeError as e:
                    raise CassetteError(f"cannot write exchange {rows[xid]['uid']}: {e}") from None
            if progress is not None:
                progress(min(start + _BATCH, len(ids)), len(ids))
        out.write(b"\n]}}\n")
        return len(ids)

    def _write_long(self, out: IO[bytes], x: dict[str, Any]) -> None:
        """One long stream's entry, its body and events written a page at a time where
        placeholders stand in the entry: three reads of the stream, never all of it held."""
        size, text = 0, True
        check = codecs.getincrementaldecoder("utf-8")()  # strict: is the body text?
        for e in self.queries.event_rows(x["id"]):
            size += len(e.raw)
            if text:
                try:
                    check.decode(e.raw)
                except UnicodeDecodeError:
                    text = False
        if text:
            try:
                check.decode(b"", final=True)
            except UnicodeDecodeError:
                text = False
        body_hole, events_hole = (f"<{secrets.token_hex(16)}>" for _ in range(2))
        entry = self.entry(x, [])
        response = entry["response"]
        response["content"] = {
            **response["content"], "size": size, "text": body_hole,
            **({} if text else {"encoding": "base64"}),
        }  # fmt: skip
        response["bodySize"] = -1 if x["status"] is None else size
        entry["_ssetape"] = events_hole
        doc = orjson.dumps(entry)
        before, _, rest = doc.partition(orjson.dumps(body_hole))
        between, _, after = rest.partition(orjson.dumps(events_hole))
        out.write(before + b'"')
        decode = codecs.getincrementaldecoder("utf-8")()
        carry = b""  # base64 goes three bytes at a time
        for e in self.queries.event_rows(x["id"]):
            if text:
                out.write(orjson.dumps(decode.decode(e.raw))[1:-1])
            else:
                data = carry + e.raw
                cut = len(data) - len(data) % 3
                out.write(base64.b64encode(data[:cut]))
                carry = data[cut:]
        out.write(base64.b64encode(carry) + b'"' + between + b"[")
        sep = b""
        for e in self.queries.event_rows(x["id"]):
            item = {"seq": e.seq, "offset_us": e.offset_us, "event": e.event, "data": e.data}
            out.write(sep + orjson.dumps(item))
            sep = b","
        out.write(b"]" + after)

    def _write_long_session(self, out: IO[bytes], x: dict[str, Any], reads: CassetteRows) -> None:
        """A long WebSocket session's entry: its frames and events written a page at a time
        where placeholders stand in the entry (two reads of the session, never all held)."""
        frames_hole, events_hole = (f"<{secrets.token_hex(16)}>" for _ in range(2))
        entry = self.entry(x, [])
        entry["_webSocketMessages"], entry["_ssetape"] = frames_hole, events_hole
        doc = orjson.dumps(entry)
        before, _, rest = doc.partition(orjson.dumps(frames_hole))
        between, _, after = rest.partition(orjson.dumps(events_hole))
        started = x["started_at"].timestamp()
        for part, item in ((before, lambda e: _frame(started, e)), (between, _event)):
            out.write(part + b"[")
            sep = b""
            for e in reads.pages("event", x["id"]):
                out.write(sep + orjson.dumps(item(e)))
                sep = b","
            out.write(b"]")
        out.write(after)

    def export(
        self, path: Path, narrow: Narrow | None = None, *, progress: Progress | None = None
    ) -> int:
        try:
            with private_file(path) as out:
                return self.write(out, narrow, progress=progress)
        except OSError as e:
            raise CassetteError(f"cannot write {path}: {e.strerror or e}") from None
