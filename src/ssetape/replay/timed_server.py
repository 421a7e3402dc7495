"""The timed source of replayed responses behind the replayer addon, in its own process.

mitmproxy cannot stream a response that an addon makes up, so the replayer re-targets a
matched flow to this server, which plays the recording (:class:`~ssetape.replay.player.Player`).
It runs in a separate process so that its timers never wait for the proxy's event loop or its
GIL: only the proxy's relay of each chunk adds latency.

The proxy names, in request headers (:class:`~ssetape.vocabulary.Header`), the exchange, the
moment the proxy had the whole request (offset zero) and the speed, with a token that only it
knows. Run as ``python -m ssetape.replay.timed_server --db URL`` (or with ``$SSETAPE_DB``); it
prints ``port N`` once listening and exits when its standard input closes (the proxy went away).
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import os
import sys
from typing import Any

from ssetape.replay.faults import Faults
from ssetape.replay.http_server import HttpServer
from ssetape.replay.player import Player
from ssetape.replay.responder import ResponseWriter, error_response
from ssetape.storage.store import Store, StoreError
from ssetape.vocabulary import Header

__all__ = ["FAULTS_ENV", "TimedServer"]

FAULTS_ENV = "SSETAPE_REPLAY_FAULTS"


class TimedServer:
    def __init__(self, store: Store, token: str, faults: Faults | None = None) -> None:
        self.faults = faults
        self.player = Player(store, faults=faults)
        self.token = token.encode()
        self.http = HttpServer(self.respond)

    async def respond(
        self,
        out: ResponseWriter[Any],
        request_line: list[bytes],
        headers: dict[bytes, bytes],
        body: bytes,
        at: float,
    ) -> bool:
        """Serve one request re-targeted by the proxy (offset zero is when the proxy had it,
        not ``at``); False to close the connection."""
        if not hmac.compare_digest(headers.get(Header.TOKEN.raw, b""), self.token):
            error_response(out, 403, "ssetape timed server: not the proxy's request")
            return True
        try:
            xid = int(headers[Header.EXCHANGE.raw])
            t0 = float(headers[Header.T0.raw])
            speed = float(headers.get(Header.SPEED.raw, b"1"))
        except (KeyError, ValueError) as e:
            error_response(out, 500, f"ssetape timed server: bad replay request: {e}")
            return True
        gaps = headers.get(Header.GAPS.raw) == b"serve"
        target = request_line[1].decode("latin-1") if len(request_line) > 1 else "/"
        if self.faults and (refusal := self.faults.refusal(target)) is not None:
            out.send(refusal)
            return True
        return await self.player.play_recording(out, request_line[0], xid, t0, speed, gaps)


async def serve(db: str, host: str, port: int) -> None:
    try:
        store = Store.open(db, create=False)
    except StoreError as e:
        print(f"error {e}", flush=True)
        return
    # `ssetape replay --fault` (one spec a line): the proxy's environment reaches us.
    specs = os.environ.get(FAULTS_ENV, "").splitlines()
    faults = Faults(s for s in specs if s.strip())
    server = TimedServer(store, os.environ.get("SSETAPE_REPLAY_TOKEN", ""), faults)
    print(f"port {await server.http.start(host, port)}", flush=True)
    loop = asyncio.get_running_loop()
    # Exit with the parent: its end of our stdin closes when it goes away.
    await loop.run_in_executor(None, sys.stdin.buffer.read)
    await server.http.stop()
    store.close()


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m ssetape.replay.timed_server")
    ap.add_argument(
        "--db", default=os.environ.get("SSETAPE_DB"), required="SSETAPE_DB" not in os.environ
    )
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args()
    asyncio.run(serve(args.db, args.host, args.port))


if __name__ == "__main__":
    main()
