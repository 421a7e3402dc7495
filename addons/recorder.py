"""mitmproxy addon that records every exchange, and every SSE event with its arrival time.

Load it into plain mitmproxy with ``mitmdump -s addons/recorder.py --set ssetape_db=tape.db``.
Nothing here blocks the event loop: rows go to the store's writer thread through a queue, and
large request bodies are redacted and fingerprinted in a worker thread.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from mitmproxy import ctx, http
from mitmproxy.addonmanager import Loader
from ssetape.storage.runs import RunCounts, RunReporter, Runs
from ssetape.storage.store import Store
from ssetape.storage.writer import Writer

from ssetape.addon_options import add_store_options, open_store, redactor_for
from ssetape.capture import Capture
from ssetape.indexer import Indexer
from ssetape.matching import canonical_request, fingerprint
from ssetape.redactor import Redactor

log = logging.getLogger("ssetape.recorder")

# flow.metadata keys: plain values only, as mitmproxy copies and saves metadata.
META = "ssetape"
REPLAYED = "ssetape_replayed"
STREAM_TYPES = ("text/event-stream", "application/x-ndjson", "application/jsonl")
# Bodies above this are redacted and hashed in a worker thread, not on the event loop.
INLINE_BODY = 64 * 1024
CLIENT_GONE = frozenset({"Client disconnected.", "Connection killed.", "connection cancelled"})


def is_streamed(response: http.Response) -> bool:
    """Bodies we pass through chunk by chunk instead of letting mitmproxy buffer them."""
    ctype = response.headers.get("content-type", "").lower()
    if ctype.startswith(STREAM_TYPES):
        return True
    if "content-length" in response.headers or ctype.startswith("application/json"):
        return False
    return response.status_code not in (204, 304)


def end_state(msg: str, has_response: bool) -> str:
    """How an exchange that ended with ``flow.error`` ended, from mitmproxy's message."""
    # HTTP/2 resets read "stream reset by client" from either side; CANCEL is the client's.
    if msg in CLIENT_GONE or msg.endswith("(CANCEL)"):
        return "aborted"
    return "truncated" if has_response else "failed"


def _n(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


class Recorder:
    def __init__(self) -> None:
        self.store: Store | None = None
        self.writer: Writer | None = None
        self.reporter: RunReporter | None = None
        self.redactor: Redactor | None = None
        self.recorder_id = f"{socket.gethostname()}:{os.getpid()}:{int(time.time())}"
        self.inflight: dict[str, http.HTTPFlow] = {}
        self.captures: dict[str, Capture] = {}
        self.capture_failures = 0
        self.hook_failures = 0
        # The counts line logged when the recorder stops; ``exit_warned``: it was a warning
        # (something was lost), so `ssetape record` need not print it again.
        self.exit_line: str | None = None
        self.exit_warned = False

    def load(self, loader: Loader) -> None:
        add_store_options(loader)
        loader.add_option(
            "ssetape_record",
            bool,
            True,
            "Record exchanges that pass through the proxy (off: pass traffic through untouched).",
        )
        loader.add_option(
            "ssetape_max_pending",
            int,
            1_000_000,
            "Rows kept in memory while the store is slow or unavailable; beyond that new "
            "events are dropped (and counted) instead of growing the proxy's memory.",
        )

    def configure(self, updated: set[str]) -> None:
        if not ctx.options.ssetape_record:
            return
        if self.store is None or "ssetape_db" in updated:
            self._close()
            self.store = open_store(ctx.options.ssetape_db)
            # Stream knowledge is derived in the writer's thread, off the event loop.
            self.writer = Writer(
                self.store,
                on_finished=Indexer(self.store).index,
                max_pending=max(1, ctx.options.ssetape_max_pending),
            )
            self.writer.start()
            self.reporter = RunReporter(
                Runs(self.store), self.recorder_id, self._counts_of(self.writer)
            )
            # Beside the replayer, a replay-only session must leave its tape untouched:
            # the run row appears with the first recorded exchange.
            self.reporter.start(active="ssetape_record_mode" not in ctx.options)
            self.redactor = None
            log.info("ssetape: recording to %s", self.store.url)
        if self.redactor is None or updated & {"ssetape_redact_header", "ssetape_redact_field"}:
            self.redactor = redactor_for(
                self.store, ctx.options.ssetape_redact_header, ctx.options.ssetape_redact_field
            )

    async def request(self, flow: http.HTTPFlow) -> None:
        if self.writer is None or self.redactor is None or not ctx.options.ssetape_record:
            return
        if flow.response is not None or REPLAYED in flow.metadata:  # served by the replayer
            return
        req = flow.request
        uid = secrets.token_hex(16)
        t0 = req.timestamp_end or time.time()
        try:
            fields = self._request_fields(flow, t0)
            if len(req.raw_content or b"") > INLINE_BODY:
                fields.update(await asyncio.to_thread(self._body_fields, req))
            else:
                fields.update(self._body_fields(req))
        except Exception:  # never let a recording bug touch the traffic
            self.hook_failures += 1
            log.exception("ssetape: cannot record %s %s; traffic continues", req.method, req.host)
            return
        flow.metadata[META] = {"uid": uid, "t0": t0}
        self.inflight[uid] = flow
        self.writer.begin(uid, **fields)
        if self.reporter is not None:
            self.reporter.activate()

    def _request_fields(self, flow: http.HTTPFlow, t0: float) -> dict[str, Any]:
        assert self.redactor is not None
        req = flow.request
        return {
            "started_at": datetime.fromtimestamp(t0, UTC),
            "method": req.method,
            "scheme": req.scheme,
            "host": req.host,
            "port": req.port,
            "http_version": req.http_version,
            "request_headers": self.redactor.headers_list(req.headers.items(multi=True)),
            "recorder": self.recorder_id,
        }

    def _body_fields(self, req: http.Request) -> dict[str, Any]:
        assert self.redactor is not None
        path, _, raw_query = req.path.partition("?")
        query = self.redactor.query(raw_query)
        body = self.redactor.body(req.raw_content)
        canon = canonical_request(req.method, req.host, path, query, body)
        return {
            "path": path,
            "query": query,
            "request_body": body,
            "fingerprint": fingerprint(canon),
        }

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        meta = flow.metadata.get(META)
        resp = flow.response
        if resp is None:
            return
        streamed = is_streamed(resp)
        if meta is None or self.writer is None or self.redactor is None:
            # Not recording this one: still never hold a stream back (mitmproxy would buffer
            # it whole). Replayed responses are the replayer's to stream.
            if streamed and REPLAYED not in flow.metadata and not resp.stream:
                resp.stream = True
            return
        uid = meta["uid"]
        self.writer.update(
            uid,
            status=resp.status_code,
            reason=resp.reason,
            response_headers=self.redactor.headers_list(resp.headers.items(multi=True)),
            ttfb_us=round((resp.timestamp_start - meta["t0"]) * 1_000_000),
            is_stream=streamed,
        )
        if streamed:
            capture = Capture(
                uid,
                meta["t0"],
                self.writer,
                sse=resp.headers.get("content-type", "").lower().startswith("text/event-stream"),
                encoding=resp.headers.get("content-encoding", ""),
            )
            self.captures[uid] = capture
            resp.stream = capture

    def response(self, flow: http.HTTPFlow) -> None:
        self._finish(flow, "completed")

    def error(self, flow: http.HTTPFlow) -> None:
        msg = flow.error.msg if flow.error else "unknown error"
        self._finish(flow, end_state(msg, flow.response is not None), msg)

    def _finish(self, flow: http.HTTPFlow, state: str, error: str | None = None) -> None:
        meta = flow.metadata.pop(META, None)
        if meta is None or self.writer is None:
            return
        uid = meta["uid"]
        self.inflight.pop(uid, None)
        fields: dict[str, object] = {"state": state, "error": error}
        capture = self.captures.pop(uid, None)
        if capture is not None:
            capture.close()
            if capture.error is not None:
                self.capture_failures += 1
                fields["error"] = "; ".join(filter(None, [error, capture.error]))
        resp = flow.response
        if resp is not None:
            end = resp.timestamp_end or time.time()
            fields["duration_us"] = round((end - meta["t0"]) * 1_000_000)
            if capture is None and state == "completed":
                fields["response_body"] = resp.raw_content
        self.writer.finish(uid, **fields)

    def done(self) -> None:
        for flow in list(self.inflight.values()):
            if flow.response is not None and callable(flow.response.stream):
                # mitmproxy may relay a few more chunks while it shuts down: they pass
                # through as they are, not into a capture that is closed.
                flow.response.stream = True
            self._finish(flow, "interrupted", "recorder stopped before the exchange ended")
        self._close()

    def _counts_of(self, writer: Writer) -> Callable[[], RunCounts]:
        def counts() -> RunCounts:  # called in the reporter's thread
            st = writer.stats
            return RunCounts(
                exchanges_recorded=st.exchanges,
                events_recorded=st.events,
                # Requests the recorder failed on, plus exchange rows the writer dropped
                # (WriterStats.dropped_exchanges, where the writer counts them).
                exchanges_lost=self.hook_failures + st.dropped_exchanges,
                events_lost=st.dropped_events,
                store_errors=st.failed_batches,
                last_error=st.last_error,
            )

        return counts

    def _close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            saved = True
            if self.reporter is not None:
                # After the writer: the final counts include what it gave up on.
                saved = self.reporter.stop() or not self.reporter.active
            self._log_counts(self._counts_of(self.writer)(), saved)
            self.writer = None
            self.reporter = None
        if self.store is not None:
            self.store.close()
            self.store = None

    def _log_counts(self, c: RunCounts, saved: bool) -> None:
        """One line with what was stored and lost: a warning if anything was lost."""
        parts = [
            f"ssetape: {_n(c.events_recorded, 'event')} in "
            f"{_n(c.exchanges_recorded, 'exchange')} stored"
        ]
        bad = c.events_lost or c.exchanges_lost or c.store_errors or self.capture_failures
        if bad:
            parts.append(
                f"{_n(c.events_lost, 'event')} and {_n(c.exchanges_lost, 'exchange')} lost"
            )
            if self.capture_failures:
                parts.append(f"{_n(self.capture_failures, 'stream')} not parsed")
            if c.store_errors:
                parts.append(f"{_n(c.store_errors, 'failed write')} (last: {c.last_error})")
        elif self.reporter is not None and not self.reporter.active:
            return  # beside the replayer, nothing was recorded: nothing to report
        else:
            parts.append("none lost")
        if not saved and self.reporter is not None:
            parts.append(f"counts not saved to the store ({self.reporter.last_failure})")
        self.exit_line = ", ".join(parts)
        self.exit_warned = bool(bad) or not saved
        log.log(logging.WARNING if self.exit_warned else logging.INFO, self.exit_line)


addons = [Recorder()]
