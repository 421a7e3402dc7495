"""mitmproxy addon that records every exchange, and every SSE event with its arrival time.

Load it into plain mitmproxy with ``mitmdump -s addons/recorder.py --set ssetape_db=tape.db``.
Nothing here blocks the event loop: rows go to the store's writer thread through a queue.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import time
from datetime import UTC, datetime

from mitmproxy import ctx, http
from mitmproxy.addonmanager import Loader
from ssetape.storage.store import Store
from ssetape.storage.writer import Writer

from ssetape.addon_options import add_store_options, open_store, redactor_for
from ssetape.capture import Capture
from ssetape.matching import canonical_request, fingerprint
from ssetape.redactor import Redactor

log = logging.getLogger("ssetape.recorder")

META = "ssetape"
REPLAYED = "ssetape_replayed"
STREAM_TYPES = ("text/event-stream", "application/x-ndjson", "application/jsonl")


def is_streamed(response: http.Response) -> bool:
    """Bodies we pass through chunk by chunk instead of letting mitmproxy buffer them."""
    ctype = response.headers.get("content-type", "").lower()
    if ctype.startswith(STREAM_TYPES):
        return True
    if "content-length" in response.headers or ctype.startswith("application/json"):
        return False
    return response.status_code not in (204, 304)


class Recorder:
    def __init__(self) -> None:
        self.store: Store | None = None
        self.writer: Writer | None = None
        self.redactor: Redactor | None = None
        self.recorder_id = f"{socket.gethostname()}:{os.getpid()}:{int(time.time())}"
        self.inflight: dict[str, http.HTTPFlow] = {}
        self.capture_failures = 0

    def load(self, loader: Loader) -> None:
        add_store_options(loader)
        loader.add_option(
            "ssetape_record",
            bool,
            True,
            "Record exchanges that pass through the proxy (off: pass traffic through untouched).",
        )

    def configure(self, updated: set[str]) -> None:
        if not ctx.options.ssetape_record:
            return
        if "ssetape_db" in updated or self.store is None:
            self._close()
            self.store = open_store(ctx.options.ssetape_db)
            self.writer = Writer(self.store)
            self.writer.start()
            log.info("ssetape: recording to %s", self.store.url)
        if updated & {"ssetape_redact_header", "ssetape_redact_field", "ssetape_db"}:
            self.redactor = redactor_for(
                self.store, ctx.options.ssetape_redact_header, ctx.options.ssetape_redact_field
            )

    def request(self, flow: http.HTTPFlow) -> None:
        if self.writer is None or self.redactor is None or not ctx.options.ssetape_record:
            return
        if flow.response is not None or REPLAYED in flow.metadata:  # served by the replayer
            return
        req = flow.request
        r = self.redactor
        path, _, raw_query = req.path.partition("?")
        query = r.query(raw_query)
        body = r.body(req.raw_content)
        uid = secrets.token_hex(16)
        t0 = req.timestamp_end or time.time()
        flow.metadata[META] = {"uid": uid, "t0": t0, "capture": None}
        self.inflight[uid] = flow
        self.writer.begin(
            uid,
            started_at=datetime.fromtimestamp(t0, UTC),
            method=req.method,
            scheme=req.scheme,
            host=req.host,
            port=req.port,
            path=path,
            query=query,
            http_version=req.http_version,
            request_headers=r.headers_list(req.headers.items(multi=True)),
            request_body=body,
            fingerprint=fingerprint(canonical_request(req.method, req.host, path, query, body)),
            recorder=self.recorder_id,
        )

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        meta = flow.metadata.get(META)
        resp = flow.response
        if meta is None or resp is None or self.writer is None or self.redactor is None:
            return
        streamed = is_streamed(resp)
        self.writer.update(
            meta["uid"],
            status=resp.status_code,
            reason=resp.reason,
            response_headers=self.redactor.headers_list(resp.headers.items(multi=True)),
            ttfb_us=int((resp.timestamp_start - meta["t0"]) * 1_000_000),
            is_stream=streamed,
        )
        if streamed:
            capture = Capture(
                meta["uid"],
                meta["t0"],
                self.writer,
                sse=resp.headers.get("content-type", "").lower().startswith("text/event-stream"),
                encoding=resp.headers.get("content-encoding", ""),
            )
            meta["capture"] = capture
            resp.stream = capture

    def response(self, flow: http.HTTPFlow) -> None:
        self._finish(flow, "completed")

    def error(self, flow: http.HTTPFlow) -> None:
        msg = flow.error.msg if flow.error else "unknown error"
        if "client" in msg.lower() or msg == "Connection killed.":
            state = "aborted"
        elif flow.response is not None:
            state = "truncated"
        else:
            state = "failed"
        self._finish(flow, state, msg)

    def _finish(self, flow: http.HTTPFlow, state: str, error: str | None = None) -> None:
        meta = flow.metadata.pop(META, None)
        if meta is None or self.writer is None:
            return
        self.inflight.pop(meta["uid"], None)
        fields: dict[str, object] = {"state": state, "error": error}
        capture: Capture | None = meta["capture"]
        if capture is not None:
            capture.close()
            if capture.error is not None:
                self.capture_failures += 1
                fields["error"] = "; ".join(filter(None, [error, capture.error]))
        resp = flow.response
        if resp is not None:
            end = resp.timestamp_end or time.time()
            fields["duration_us"] = int((end - meta["t0"]) * 1_000_000)
            if capture is None and state == "completed":
                fields["response_body"] = resp.raw_content
        self.writer.finish(meta["uid"], **fields)

    def done(self) -> None:
        for flow in list(self.inflight.values()):
            self._finish(flow, "interrupted", "recorder stopped before the exchange ended")
        self._close()

    def _close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            st = self.writer.stats
            if st.dropped_events or st.failed_batches or self.capture_failures:
                log.warning(
                    "ssetape: %d events could not be stored, %d failed batches, "
                    "%d streams not parsed",
                    st.dropped_events,
                    st.failed_batches,
                    self.capture_failures,
                )
            self.writer = None
        if self.store is not None:
            self.store.close()
            self.store = None


addons = [Recorder()]
