"""The forward proxy in front of the pytest plugin's in-process replay server.

A test that uses ``ssetape.proxy_url`` talks to mitmproxy (HTTPS interception needs it); this
addon sends every request on to the test process's cassette server, naming the original host
and the moment the proxy had the whole request, and streams the answer back as it comes.

Run as ``python -m ssetape.testing.cassette_forwarder --target PORT [--port 0] [--confdir DIR]``; it
prints ``listening on http://HOST:PORT`` once ready and exits when its standard input closes
(the test process went away) or on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading

from mitmproxy import http

from ssetape.recording.clock import monotonic_of
from ssetape.replay.proxy_runner import ProxyRunner, ProxyStartError
from ssetape.vocabulary import Header


class CassetteForwarder:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port

    def request(self, flow: http.HTTPFlow) -> None:
        req = flow.request
        req.headers[Header.HOST] = req.host
        req.headers[Header.T0] = repr(monotonic_of(req.timestamp_end))
        req.scheme, req.host, req.port = "http", "127.0.0.1", self.target_port

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        if flow.response is not None:
            flow.response.stream = True


async def _serve(args: argparse.Namespace) -> None:
    def ready(host: str, port: int) -> None:
        print(f"ssetape forwarder: listening on http://{host}:{port}", flush=True)

    runner = ProxyRunner(
        [CassetteForwarder(args.target)],
        host="127.0.0.1",
        port=args.port,
        confdir=args.confdir,
        # No upstream exists: never dial one before the request is known.
        options={"connection_strategy": "lazy"},
        on_ready=ready,
    )
    loop = asyncio.get_running_loop()

    def watch_parent() -> None:
        sys.stdin.buffer.read()  # returns when the test process closes its end
        loop.call_soon_threadsafe(runner.shutdown)

    # A daemon thread, not the loop's executor: asyncio.run would wait for a blocked read.
    threading.Thread(target=watch_parent, daemon=True).start()
    await runner.run()


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m ssetape.testing.cassette_forwarder")
    ap.add_argument("--target", type=int, required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--confdir", default=None)
    try:
        asyncio.run(_serve(ap.parse_args()))
    except ProxyStartError as e:
        print(f"error {e}", flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
