"""mitmproxy addon that records every exchange, and every SSE event with its arrival time.

Load it into plain mitmproxy with ``mitmdump -s addons/recorder.py --set ssetape_db=tape.db``.
Nothing here blocks the event loop, and little runs on it: the stream callable only stamps each
chunk and hands it to the recording process (``RecordLink``), which parses and stores; large
request bodies are redacted and fingerprinted in a worker thread, and those over ``MAX_BODY``
(or of unknown length) stream through to the upstream, hashed as they pass, never held whole;
so do response bodies over ``ssetape_max_response_body`` (``response_body``), to the client.
Every offset, TTFB and duration is measured on the monotonic clock (``recording.clock``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import secrets
import threading
from collections.abc import Callable
from typing import Any

from mitmproxy import ctx, exceptions, http
from mitmproxy.addonmanager import Loader

from ssetape.addons.guard import ConnectionGuard
from ssetape.addons.options import (
    at_least,
    check_target,
    configured_price_data,
    configured_retention,
    configured_session,
    default_db,
    open_store,
    seconds,
    store_redactor,
    take_session,
)
from ssetape.addons.recorder_options import add_recorder_options
from ssetape.addons.request_body import (
    body_fields,
    partial_body_fields,
    tap_if_large,
    tapped,
)
from ssetape.addons.response_body import (
    is_streamed,
    response_body_fields,
    tap_response,
)
from ssetape.analysis.profiles import (
    parse_profile_overrides,
    profile_for,
)
from ssetape.framing.framings import framing_of
from ssetape.recording import clock
from ssetape.recording.body_tap import BodyTap
from ssetape.recording.exit_line import counts_line
from ssetape.recording.link import RecordLink
from ssetape.redactor import Redactor
from ssetape.storage.store import Store
from ssetape.vocabulary import INLINE_BODY, ExchangeState, RecordMode

log = logging.getLogger("ssetape.recorder")

# flow.metadata keys: plain values only, as mitmproxy copies and saves metadata.
META = "ssetape"
SESSION_META = "ssetape_websocket"  # META, moved once the exchange is a WebSocket session
REPLAYED = "ssetape_replayed"
SESSION = "ssetape_session"  # the session the request's header named
CLIENT_GONE = frozenset({"Client disconnected.", "Connection killed.", "connection cancelled"})
READY_WAIT = 30.0  # seconds the proxy's start waits for the recording process, at most
STOPPED = "recorder stopped before the exchange ended"
MOVED = "the store changed (ssetape_db) before the exchange ended"


def end_state(msg: str, has_response: bool) -> str:
    """How an exchange that ended with ``flow.error`` ended, from mitmproxy's message."""
    # HTTP/2 resets read "stream reset by client" from either side; CANCEL is the client's.
    if msg in CLIENT_GONE or msg.endswith("(CANCEL)"):
        return ExchangeState.ABORTED
    return ExchangeState.TRUNCATED if has_response else ExchangeState.FAILED


class Recorder:
    def __init__(self) -> None:
        self.store: Store | None = None
        self.link: RecordLink | None = None
        self.redactor: Redactor | None = None
        self.profiles: dict[str, str] = {}  # ssetape_profile, parsed
        self.session: str | None = None  # ssetape_session, checked
        self.inflight: dict[str, http.HTTPFlow] = {}
        # The counts line logged when the recorder stops; ``exit_warned``: it was a warning
        # (something was lost), so `ssetape record` need not print it again.
        self.exit_line: str | None = None
        self.exit_warned = False
        # Its end, e.g. how a drain went (``addons.drain``): given how many exchanges the stop
        # interrupted (counted as they end, so the line says what the store holds).
        self.exit_note: Callable[[int], str | None] | None = None
        self.stop_interrupted = 0  # exchanges a stop (a drain deadline, the end) interrupted
        self._running = False  # the proxy relays: a store is opened off its event loop
        self._opened_with: tuple[Any, ...] | None = None
        self._reopening: set[asyncio.Task[None]] = set()

    def load(self, loader: Loader) -> None:
        add_recorder_options(loader)

    async def running(self) -> None:
        self._running = True
        # Whoever waits for the proxy to be up (`ssetape record` prints its address after
        # this hook) can count on recording too: the recording process has its store open.
        link = self.link
        if link is not None and not await asyncio.to_thread(link.wait_ready, READY_WAIT):
            log.warning("ssetape: the recording process is not ready yet; traffic flows anyway")

    def configure(self, updated: set[str]) -> None:
        # Read as each exchange begins: a change applies to the exchanges after it.
        self.session = configured_session(ctx.options.ssetape_session)
        if not ctx.options.ssetape_record:
            return
        deadline = seconds("ssetape_store_timeout", ctx.options.ssetape_store_timeout)
        max_pending = at_least("ssetape_max_pending", ctx.options.ssetape_max_pending, 1)
        # Read by each stream as it begins: a change applies to the streams after it.
        at_least("ssetape_max_event", ctx.options.ssetape_max_event, 1024)
        at_least("ssetape_max_decoded", ctx.options.ssetape_max_decoded, 1 << 20)
        at_least("ssetape_max_response_body", ctx.options.ssetape_max_response_body, 1024)
        try:
            self.profiles = parse_profile_overrides(ctx.options.ssetape_profile)
        except ValueError as e:
            raise exceptions.OptionsError(f"ssetape_profile: {e}") from None
        price_data = configured_price_data(ctx.options.ssetape_price_data, updated)
        retention = configured_retention(ctx.options)
        new_retention = self.link is not None and self.link.retention != retention
        # By value: mitmproxy configures every addon again when one that joins the chain
        # declares an option (the admin server's); a store opened twice is two runs.
        o = ctx.options
        opened_with = (o.ssetape_db, o.ssetape_store_timeout, o.ssetape_price_data)
        if new_retention or self.store is None or opened_with != self._opened_with:
            previous, self._opened_with = self._opened_with, opened_with
            target = ctx.options.ssetape_db
            make_link = functools.partial(
                RecordLink,
                target or default_db(),
                max_pending=max_pending,
                deadline=deadline,
                price_data=price_data,
                retention=retention,
                # Beside the replayer, a replay-only session must leave its tape untouched.
                active="ssetape_record_mode" not in ctx.options,
            )
            try:
                check_target(target)
                # Before the proxy listens: opened here, migrations run once. While streams
                # flow: in a thread (it can take seconds); the old store records until the
                # new one is open, and stays if it cannot be.
                store = None if self._running else open_store(target)
            except exceptions.OptionsError:
                self._opened_with = previous  # the old store stays, and so does its key
                raise
            if store is None:
                reopen = self._reopen(target, make_link, previous)
                task = asyncio.get_running_loop().create_task(reopen)
                self._reopening.add(task)
                task.add_done_callback(self._reopening.discard)
                return
            self._adopt(store, make_link)
        if self.redactor is None or updated & {"ssetape_redact_header", "ssetape_redact_field"}:
            assert self.store is not None
            self.redactor = store_redactor(
                self.store, ctx.options.ssetape_redact_header, ctx.options.ssetape_redact_field
            )

    async def _reopen(self, target: str, make_link: Callable[..., RecordLink], old: Any) -> None:
        try:
            store = await asyncio.to_thread(open_store, target)
        except exceptions.OptionsError as e:
            self._opened_with = old
            where = self.store.url if self.store is not None else "nothing"
            log.error("ssetape: ssetape_db: %s; still recording to %s", e, where)
            return
        self._adopt(store, make_link)
        self.redactor = store_redactor(
            store, ctx.options.ssetape_redact_header, ctx.options.ssetape_redact_field
        )

    def _adopt(self, store: Store, make_link: Callable[[], RecordLink]) -> None:
        """Record into ``store`` from now on; the old one's recording process finishes what
        it holds in a thread of its own."""
        self._retire()
        self.store = store
        self.link = make_link()
        self.link.start()
        self.redactor = None
        log.info("ssetape: recording to %s", store.url)

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        """A body over MAX_BODY, or of unknown length, streams through a tap instead of being
        buffered whole by mitmproxy: the proxy's memory stays bounded whatever the upload.
        The session header goes whether or not this request is recorded."""
        session = take_session(flow.request)
        if session is not None:
            flow.metadata[SESSION] = session
        if self.link is not None and ctx.options.ssetape_record and not self._may_replay():
            tap_if_large(flow.request)

    @staticmethod
    def _may_replay() -> bool:
        """Beside the replayer, a request may be answered from the tape in its ``request``
        hook, which needs the body whole: it is not streamed."""
        opts = ctx.options
        return "ssetape_record_mode" in opts and opts.ssetape_record_mode != RecordMode.ALL

    async def request(self, flow: http.HTTPFlow) -> None:
        if self.link is None or self.redactor is None or not ctx.options.ssetape_record:
            return
        if flow.response is not None or REPLAYED in flow.metadata:  # served by the replayer
            return
        req = flow.request
        uid = secrets.token_hex(16)
        t0 = clock.ticks()  # the offsets' zero: the proxy has the whole request
        tap = tapped(req)
        try:
            fields = self._request_fields(flow)
            if (tap.size if tap is not None else len(req.raw_content or b"")) > INLINE_BODY:
                fields.update(await asyncio.to_thread(body_fields, self.redactor, req, tap))
            else:
                fields.update(body_fields(self.redactor, req, tap))
        except Exception:  # never let a recording bug touch the traffic
            self._lost(req)
            return
        self._begin(flow, uid, t0, fields)

    def _begin(self, flow: http.HTTPFlow, uid: str, t0: int, fields: dict[str, Any]) -> None:
        assert self.link is not None
        flow.metadata[META] = {"uid": uid, "t0": t0}
        self.inflight[uid] = flow
        self.link.begin(uid, fields)

    def _answered_early(self, flow: http.HTTPFlow) -> None:
        """The upstream answered a request whose body still streams through the tap (a 413,
        a 401): the exchange begins now, with what of the body had passed (its stand-in and
        a note), or it would go unrecorded; its ``request`` hook, if it comes, skips it."""
        req, tap = flow.request, flow.request.stream
        if not isinstance(tap, BodyTap) or req.timestamp_end is not None or self.redactor is None:
            return
        t0 = clock.ticks()
        try:
            fields = self._request_fields(flow)
            fields.update(partial_body_fields(self.redactor, req, tap))
        except Exception:  # never let a recording bug touch the traffic
            self._lost(req)
            return
        self._begin(flow, secrets.token_hex(16), t0, fields)
        flow.metadata[META]["early"] = tap.size

    def _lost(self, req: http.Request) -> None:
        assert self.link is not None
        self.link.note_lost_exchange()
        log.exception("ssetape: cannot record %s %s; traffic continues", req.method, req.host)

    def _request_fields(self, flow: http.HTTPFlow) -> dict[str, Any]:
        assert self.redactor is not None
        req = flow.request
        return {
            # The one wall-clock reading of the exchange; everything after it is monotonic.
            "started_at": clock.started_at(req.timestamp_end),
            "method": req.method,
            "scheme": req.scheme,
            "host": req.host,
            "port": req.port,
            # Chosen as the exchange begins, so live analysis and reindex read it alike.
            "profile": profile_for(req.host, self.profiles, req.port).name,
            "session": flow.metadata.get(SESSION) or self.session,
            "http_version": req.http_version,
            "request_headers": self.redactor.headers_list(req.headers.items(multi=True)),
        }

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        meta = flow.metadata.get(META)
        resp = flow.response
        if resp is None:
            return
        streamed = is_streamed(resp, flow.request.path)
        if meta is None and self.link is not None and REPLAYED not in flow.metadata:
            self._answered_early(flow)
            meta = flow.metadata.get(META)
        if meta is None or self.link is None or self.redactor is None:
            # Not recording this one: still never hold a stream back (mitmproxy would buffer
            # it whole). Replayed responses are the replayer's to stream.
            if streamed and REPLAYED not in flow.metadata and not resp.stream:
                resp.stream = True
            elif REPLAYED not in flow.metadata:
                tap_response(resp, ctx.options.ssetape_max_response_body, recorded=False)
            return
        uid = meta["uid"]
        self.link.update(
            uid,
            {
                "status": resp.status_code,
                "reason": resp.reason,
                "response_headers": self.redactor.headers_list(resp.headers.items(multi=True)),
                "ttfb_us": clock.since(meta["t0"]),
                "is_stream": streamed,
            },
        )
        if streamed:
            self.link.stream(
                uid,
                framing=framing_of(resp.headers.get("content-type")),
                encoding=resp.headers.get("content-encoding", ""),
                max_event=ctx.options.ssetape_max_event,
                max_decoded=ctx.options.ssetape_max_decoded,
            )
            resp.stream = self._stamper(self.link, uid, meta["t0"])
            meta["streamed"] = True
        else:  # one body: past the bound (or of unknown length) it streams through a tap
            tap_response(resp, ctx.options.ssetape_max_response_body, recorded=True)

    @staticmethod
    def _stamper(link: RecordLink, uid: str, t0: int) -> Callable[[bytes], bytes]:
        """The stream callable: each chunk passes unchanged and at once, stamped on its way."""

        def stamp(data: bytes) -> bytes:
            if data:
                try:
                    link.chunk(uid, clock.since(t0), data)
                except Exception:  # never let a recording bug touch the traffic
                    log.exception("ssetape: cannot record a chunk of %s; traffic continues", uid)
            return data

        return stamp

    def response(self, flow: http.HTTPFlow) -> None:
        self._finish(flow, ExchangeState.COMPLETED)

    def error(self, flow: http.HTTPFlow) -> None:
        msg = flow.error.msg if flow.error else "unknown error"
        self._finish(flow, end_state(msg, flow.response is not None), msg)

    def _finish(self, flow: http.HTTPFlow, state: str, error: str | None = None) -> bool:
        """Ends the exchange of ``flow``; False when it had none to end."""
        meta = flow.metadata.pop(META, None)
        if meta is None or self.link is None:
            return False
        uid = meta["uid"]
        self.inflight.pop(uid, None)
        now = clock.since(meta["t0"])
        if meta.get("early") is not None:
            early = f"the upstream answered after {meta['early']} bytes of the request body"
            error = f"{error}; {early}" if error else early
        fields: dict[str, object] = {"state": state, "error": error}
        resp = flow.response
        if resp is not None:
            # Its hooks run as the response ends (or fails): now is its end.
            fields["duration_us"] = now
            if not meta.get("streamed") and state == ExchangeState.COMPLETED:
                body, missed = response_body_fields(resp)
                fields.update(body)
                if missed is not None:
                    fields["error"] = f"{error}; {missed}" if error else missed
        self.link.finish(uid, now, fields)
        return True

    def done(self) -> None:
        self.stop_interrupted += self.interrupt(STOPPED)
        link, store, self.link, self.store = self.link, self.store, None, None
        self._close(link, store, last=True)

    def interrupt(self, why: str) -> int:
        """End the exchanges in flight as interrupted; the rest of their streams passes
        through as it is (mitmproxy may relay more chunks), not into a closed capture.
        Returns how many it ended: what the store will hold so, not what was in flight."""
        ended = 0
        for uid, flow in list(self.inflight.items()):
            if flow.response is not None and callable(flow.response.stream):
                flow.response.stream = True
            if SESSION_META in flow.metadata:  # a WebSocket session's: ended here too
                flow.metadata[META] = flow.metadata.pop(SESSION_META)
            ended += self._finish(flow, ExchangeState.INTERRUPTED, why)
            self.inflight.pop(uid, None)  # with its exchange ended or without one: not in flight
        return ended

    def _retire(self) -> None:
        """``ssetape_db`` changed at runtime: the old recording process stores what it has
        in a thread of its own (that can take seconds), never on the event loop."""
        if self.link is None:
            return
        self.interrupt(MOVED)
        link, store, self.link, self.store = self.link, self.store, None, None
        link.detach()
        # Not a daemon: the proxy waits for it at exit, so nothing handed over is lost.
        threading.Thread(
            target=self._close, args=(link, store), kwargs={"last": False}, name="ssetape-retire"
        ).start()

    def _close(self, link: RecordLink | None, store: Store | None, *, last: bool) -> None:
        if link is not None:
            note = self.exit_note(self.stop_interrupted) if last and self.exit_note else None
            line, warned = counts_line(link.close(), link, note)
            if line is not None:
                log.log(logging.WARNING if warned else logging.INFO, line)
            if last:  # the exit line is the session's last store's
                self.exit_line, self.exit_warned = line, warned
        if store is not None:
            store.close()


addons = [ConnectionGuard(), Recorder()]
