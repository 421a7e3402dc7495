"""The simulator's WebSocket side: which API an upgrade request's path names, and the session
on its connection once the HTTP/1.1 server hands it over.

Paths, as the official SDKs dial them (any prefix, the query aside): ``.../realtime``
(openai's ``client.realtime.connect(model=M)``: ``/v1/realtime?model=M``), ``.../responses``
(``client.responses.connect()``), and Gemini Live's ``...BidiGenerateContent`` (and
``...BidiGenerateContentConstrained``, for ephemeral tokens). The 101 is wsproto's, made for
the client's key: the subprotocol ``realtime`` only when the client offered it (browsers do,
the SDKs offer none), no extension (permessage-deflate declined: one message, one frame).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from typing import Literal, TypeAlias

from ssetape.framing.websocket import HandshakeRefused, WebSocket
from ssetape.simulator.ws_gemini import serve_gemini
from ssetape.simulator.ws_realtime import RealtimePlan, serve_realtime
from ssetape.simulator.ws_responses import serve_responses
from ssetape.simulator.ws_wire import Gone, Session, Wire

__all__ = ["Upgrade", "WsApi", "ws_api"]

WsApi: TypeAlias = Literal["realtime", "responses", "gemini"]


def ws_api(target: str) -> WsApi | None:
    """The API whose WebSocket endpoint ``target`` is, or None (not one)."""
    path = target.split("?", 1)[0].rstrip("/")
    if path.endswith(("BidiGenerateContent", "BidiGenerateContentConstrained")):
        return "gemini"
    if path.endswith("/responses"):
        return "responses"
    if path.endswith("/realtime"):
        return "realtime"
    return None


class Upgrade:
    """One upgraded connection: the handshake, then the session of its API until it ends."""

    def __init__(self, api: WsApi, target: str, raw_headers: list[tuple[bytes, bytes]]) -> None:
        self.api = api
        self.target = target
        self.raw_headers = raw_headers

    def head(self) -> bytes:
        """The request's head again, for wsproto's handshake (h11 read it already)."""
        lines = [f"GET {self.target} HTTP/1.1".encode("latin-1")]
        lines += [name + b": " + value for name, value in self.raw_headers]
        return b"\r\n".join(lines) + b"\r\n\r\n"

    async def serve(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        pending: bytes,
        *,
        speed: float,
        ids: Iterator[int],
        realtime: RealtimePlan,
        sessions: list[Session] | None,
        verbose: bool,
    ) -> None:
        """The session; ``pending`` is what came after the request's head. ``sessions``
        keeps it, if given."""
        ws = WebSocket()
        try:
            ws.request(self.head())
        except HandshakeRefused as e:
            writer.write(e.answer)
            self._log(verbose, f"refused: {e}")
            return
        chosen = "realtime" if "realtime" in ws.subprotocols else None
        writer.write(ws.accept(chosen, [(b"server", b"ssetape-simulator")]))
        loop = asyncio.get_running_loop()
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in self.raw_headers}
        session = Session(self.target, headers, opened=loop.time())
        if sessions is not None:
            sessions.append(session)
        wire = Wire(ws, reader, writer, session, speed=speed, ids=ids)
        wire.start(pending)
        try:
            if self.api == "gemini":
                await serve_gemini(wire)
            elif self.api == "responses":
                await serve_responses(wire)
            else:
                await serve_realtime(wire, realtime)
        except Gone:
            pass  # the client left while it was being answered: the session is over
        finally:
            await wire.finish()
            sent, got = len(session.sent), len(session.received)
            self._log(verbose, f"101 {self.api}, {sent} frames sent, {got} received, "
                               f"{wire.ending}")  # fmt: skip

    def _log(self, verbose: bool, what: str) -> None:
        if verbose:
            print(f"GET {self.target} (websocket) -> {what}", file=sys.stderr, flush=True)
