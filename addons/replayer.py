"""mitmproxy addon that serves recorded exchanges back with their original timing.

Matched flows are re-targeted to ssetape's timed server (a child process on loopback) that
writes the recorded bytes at their recorded offsets; the proxy streams them to the client.
Load it into plain mitmproxy with ``mitmdump -s addons/replayer.py --set ssetape_db=tape.db``
(this file also loads the recorder, for the record modes that record).
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import sys
from collections.abc import Sequence

from mitmproxy import ctx, exceptions, http, tls
from mitmproxy.addonmanager import Loader

from ssetape.addons.guard import ConnectionGuard
from ssetape.addons.handshakes import HandshakeSlots
from ssetape.addons.options import (
    add_store_options,
    check_paths,
    default_db,
    open_store,
    store_redactor,
)
from ssetape.addons.recorder import REPLAYED, Recorder
from ssetape.recording.clock import monotonic_of
from ssetape.redactor import Redactor
from ssetape.replay.miss import Miss, MissKind
from ssetape.replay.request_index import RequestIndex
from ssetape.replay.ws_miss import is_miss_close, is_miss_event
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from ssetape.vocabulary import INLINE_BODY, Header, RecordMode

log = logging.getLogger("ssetape.replayer")

OWN_OPTIONS = frozenset(
    {"ssetape_db", "ssetape_record_mode", "ssetape_speed", "ssetape_ignore_field",
     "ssetape_match_host", "ssetape_repeat", "ssetape_allow_gaps", "ssetape_redact_header",
     "ssetape_redact_field"}
)  # fmt: skip


def parse_speed(value: str) -> float:
    try:
        speed = float(value)
    except ValueError:
        speed = -1.0
    if not speed >= 0 or speed == float("inf"):
        raise exceptions.OptionsError(
            f"ssetape_speed: {value!r} is not a speed (1 = recorded timing, 2 = twice as fast, "
            "0 = no delays)"
        )
    return speed


class Replayer:
    def __init__(self) -> None:
        self.store: Store | None = None
        self.index: RequestIndex | None = None
        self.redactor: Redactor | None = None
        self.speed = 1.0
        self.tape_was_empty = False
        self.server: asyncio.subprocess.Process | None = None
        self.server_port: int | None = None
        self.server_ready = asyncio.Event()
        # Only the proxy may ask the timed server for recordings.
        self.token = secrets.token_hex(16)
        self.hits = 0
        self.misses = 0

    def load(self, loader: Loader) -> None:
        add_store_options(loader)
        loader.add_option(
            "ssetape_record_mode",
            str,
            RecordMode.NONE.value,
            "VCR-style record mode: none (replay only; a miss is an error), once (record when "
            "the tape is empty, else as none), new_episodes (replay hits, record misses), "
            "all (record everything, replay nothing).",
            choices=RecordMode.names(),
        )
        loader.add_option(
            "ssetape_speed",
            str,
            "1",
            "Replay speed: 1 = recorded timing, 2 = twice as fast, 0 = no delays at all.",
        )
        loader.add_option(
            "ssetape_ignore_field",
            Sequence[str],
            [],
            "JSON body fields (dotted paths) left out when matching requests to recordings.",
        )
        loader.add_option(
            "ssetape_match_host", bool, True, "Require the host to match a recording's host."
        )
        loader.add_option(
            "ssetape_repeat",
            bool,
            True,
            "After all recordings of a request were served in order, keep serving the last one "
            "(off: answer further repeats as a miss).",
        )
        loader.add_option(
            "ssetape_allow_gaps",
            bool,
            False,
            "Serve recordings past the events they miss (off: stop at the first gap). Either "
            "way the response says what is missing in an x-ssetape-incomplete header.",
        )

    def configure(self, updated: set[str]) -> None:
        if not updated & OWN_OPTIONS and self.store is not None:
            return  # another addon's option: keep the index and its served counters
        opts = ctx.options
        try:
            mode = RecordMode.parse(opts.ssetape_record_mode, "ssetape_record_mode")
        except ValueError as e:
            raise exceptions.OptionsError(str(e)) from None
        self.speed = parse_speed(opts.ssetape_speed)
        check_paths("ssetape_ignore_field", opts.ssetape_ignore_field)
        if "ssetape_db" in updated or self.store is None:
            if self.store is not None:
                self.store.close()
            self.store = open_store(opts.ssetape_db, create=mode != RecordMode.NONE)
            self.tape_was_empty = not Queries(self.store).exchanges(limit=1)
        self.redactor = store_redactor(
            self.store, opts.ssetape_redact_header, opts.ssetape_redact_field
        )
        self.index = RequestIndex(
            self.store,
            self.redactor,
            ignore=opts.ssetape_ignore_field,
            match_host=opts.ssetape_match_host,
            repeat=opts.ssetape_repeat,
            # Recording new episodes, a cut recording is recorded again rather than replayed.
            rerecord_cut=mode.forwards_misses,
        )
        # Without an upstream, CONNECT must not dial the server before the request is known.
        if opts.connection_strategy != "lazy":
            opts.update(connection_strategy="lazy")

    async def running(self) -> None:
        assert self.store is not None
        # The URL goes through the environment: it may hold a password.
        self.server = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "ssetape.replay.timed_server",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env={
                **os.environ,
                "SSETAPE_DB": ctx.options.ssetape_db or default_db(),
                "SSETAPE_REPLAY_TOKEN": self.token,
            },
        )
        assert self.server.stdout is not None
        line = (await self.server.stdout.readline()).decode().strip()
        if not line.startswith("port "):
            log.error("ssetape: the replay server did not start: %s", line or "no output")
            ctx.master.shutdown()
            return
        self.server_port = int(line.split()[1])
        self.server_ready.set()

    def tls_start_client(self, data: tls.TlsData) -> None:
        """Speak HTTP/2 to clients that offer it: with no upstream, mitmproxy would pick the
        client's first offer, which is http/1.1 for httpx even with http2=True."""
        if not self._replaying() or data.ssl_conn is None or data.context.server.alpn:
            return
        layers = data.context.layers
        if len(layers) == 2 and type(layers[0]).__name__ == "HttpProxy":
            return  # TLS to the proxy itself: mitmproxy cannot do CONNECT over HTTP/2
        if ctx.options.http2 and b"h2" in data.context.client.alpn_offers:
            app = data.ssl_conn.get_app_data()
            app["client_alpn"] = b"h2"

    def _replaying(self) -> bool:
        mode = RecordMode(ctx.options.ssetape_record_mode)
        return mode.replays(tape_empty=self.tape_was_empty)

    async def request(self, flow: http.HTTPFlow) -> None:
        if flow.response is not None or not self._replaying() or self.index is None:
            return
        req = flow.request
        t0 = monotonic_of(req.timestamp_end)
        index = self.index
        try:
            # A known request with a small body is matched right here, as the direct
            # replay server does: a hop through a worker thread per request queues up
            # behind the others under a burst of hundreds of streams.
            found = None
            if len(req.raw_content or b"") <= INLINE_BODY:
                found = index.lookup(
                    req.method, req.host, req.path, req.raw_content, may_query=False, port=req.port
                )
            if found is None:
                found = await asyncio.to_thread(
                    index.lookup, req.method, req.host, req.path, req.raw_content, port=req.port
                )
        except Exception as e:  # never forward what should have been replayed
            log.exception("ssetape: replay lookup failed")
            found = Miss.error(f"{req.method} {req.host}:{req.port}{req.path}", e)
            if not RecordMode(ctx.options.ssetape_record_mode).forwards_misses:
                self._answer_miss(flow, found, status=500)
                return
        assert found is not None  # may_query was on
        if isinstance(found, int):
            # The proxy accepts connections a moment before the timed server is up.
            await self.server_ready.wait()
            self.hits += 1
            flow.metadata[REPLAYED] = found
            req.headers[Header.EXCHANGE] = str(found)
            req.headers[Header.T0] = repr(t0)
            req.headers[Header.SPEED] = repr(self.speed)
            req.headers[Header.TOKEN] = self.token
            req.headers[Header.GAPS] = "serve" if ctx.options.ssetape_allow_gaps else "cut"
            assert self.server_port is not None
            req.scheme, req.host, req.port = "http", "127.0.0.1", self.server_port
            return
        if RecordMode(ctx.options.ssetape_record_mode).forwards_misses:
            if found.kind is MissKind.CUT:
                log.warning("ssetape: %s", found.message)  # re-recorded: say so
            return  # forwarded upstream; the recorder keeps it
        self.misses += 1
        self._answer_miss(flow, found)

    def _answer_miss(self, flow: http.HTTPFlow, miss: Miss, status: int = 404) -> None:
        log.warning("ssetape: %s", miss.message)
        flow.response = http.Response.make(
            status, miss.body(), {"content-type": "application/json", Header.MISS: "1"}
        )
        flow.metadata[REPLAYED] = None

    def websocket_message(self, flow: http.HTTPFlow) -> None:
        """A session the timed server plays: a client frame it answered as a miss counts as
        the HTTP misses do (the timed server told it on the log)."""
        ws = flow.websocket
        if ws is None or not ws.messages or flow.metadata.get(REPLAYED) is None:
            return
        message = ws.messages[-1]
        if not message.from_client and is_miss_event(message.content):
            self.misses += 1
        # mitmproxy relays ``message`` itself, not the list, and keeps every message of a
        # session in it: a replayed session of hours would grow the proxy. The last one stays
        # for the addons after this one (the recorder trims what it records the same way).
        del ws.messages[:-1]

    def websocket_end(self, flow: http.HTTPFlow) -> None:
        ws = flow.websocket  # Gemini Live's way: a close 1008 answered the miss
        if (
            ws is not None
            and flow.metadata.get(REPLAYED) is not None
            and (not ws.closed_by_client and is_miss_close(ws.close_code, ws.close_reason))
        ):
            self.misses += 1

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        if flow.metadata.get(REPLAYED) is not None and flow.response is not None:
            flow.response.stream = True

    async def done(self) -> None:
        if self.server is not None and self.server.returncode is None:
            self.server.kill()
            await self.server.wait()
        if self.store is not None:
            self.store.close()
            self.store = None
        if self.hits or self.misses:  # `ssetape replay` prints it; mitmdump -s logs it
            log.info("ssetape: replayed %d, missed %d", self.hits, self.misses)


addons = [ConnectionGuard(), HandshakeSlots(), Replayer(), Recorder()]
