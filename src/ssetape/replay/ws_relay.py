"""A WebSocket session that missed, in record mode new_episodes: its upgrade relayed to the
recording proxy and, once the proxy answers 101, the two connections joined byte for byte
until either side ends. mitmproxy records the session (its frames, their times, its end) as
`ssetape record` does; the next session opened with the same upgrade request is a hit.

Sessions are not coalesced as identical HTTP misses are: each is a conversation of its own
whose frames the upgrade request does not tell, so each that misses is relayed, and none
waits for another's recording. The joined connection is a new one each time (a session
holds it until it ends, and nothing can be kept after).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from ssetape.replay.relay import Relayed, unreached
from ssetape.replay.responder import ResponseWriter
from ssetape.replay.ws_session import WsUpgrade

__all__ = ["relay_session"]

_READ = 1 << 16


async def relay_session(
    port: int,
    out: ResponseWriter[Any],
    upgrade: WsUpgrade,
    request_line: list[bytes],
    headers: dict[bytes, bytes],
) -> Relayed:
    """Relay ``upgrade`` to the recording proxy on ``port`` and join the connections."""
    try:
        # The proxy's answer head is read with the stream's limit (64 KiB): mitmproxy's are a
        # few hundred bytes, and a longer one is a refusal of ours, not a buffer that grows.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError as e:
        return unreached(out, e)
    try:
        writer.write(_head(request_line, headers))
        try:
            answer = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError) as e:
            return unreached(out, OSError(f"no answer to the upgrade: {e!r}"))
        # Whatever it answered (101, or a refusal the upstream gave) goes to the client as
        # sent: from here the client's connection is the proxy's, to its end.
        upgrade.taken = True
        upgrade.writer.write(answer)
        await _join(upgrade.reader, upgrade.writer, reader, writer)
        return Relayed(going_on=False, reached=True)
    finally:
        writer.close()


def _head(request_line: list[bytes], headers: dict[bytes, bytes]) -> bytes:
    """The upgrade request as the client sent it (its target as the relay sends HTTP misses:
    origin-form in reverse mode, absolute-form in forward mode), with every header it sent:
    the handshake's are the upstream's to answer."""
    target = request_line[1] if len(request_line) > 1 else b"/"
    lines = [b"GET " + target + b" HTTP/1.1"]
    lines += [name + b": " + value for name, value in headers.items()]
    return b"\r\n".join(lines) + b"\r\n\r\n"


async def _join(
    client_in: asyncio.StreamReader,
    client_out: asyncio.StreamWriter,
    proxy_in: asyncio.StreamReader,
    proxy_out: asyncio.StreamWriter,
) -> None:
    """Bytes both ways until one side ends; then the other is ended too (an end the proxy
    relays from the upstream reaches the client as it came: a close frame, or a cut)."""

    async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await src.read(_READ):
                dst.write(data)
                await dst.drain()  # bounded: a reader that does not read holds the writer

    ways = [asyncio.ensure_future(pump(client_in, proxy_out)),
            asyncio.ensure_future(pump(proxy_in, client_out))]  # fmt: skip
    try:
        await asyncio.wait(ways, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for way in ways:
            way.cancel()
        await asyncio.gather(*ways, return_exceptions=True)
        with contextlib.suppress(ConnectionError, OSError):
            await client_out.drain()
        client_out.close()
