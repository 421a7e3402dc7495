"""The recording proxy's answers to control requests (the vocabulary is ``recording.control``).

Off unless ``ssetape_control`` holds a secret. With it, a request whose ``x-ssetape-control``
header is that secret is answered here, before the recorder sees it: it is neither forwarded
nor recorded. A request with the header and another value gets a 403 and is not forwarded
either. Off, the header is taken out and the request goes on as any other.

The pytest plugin uses this to share one recording proxy between the tests of a process: it
names each test's session, and settles the proxy before it writes a cassette.
"""

from __future__ import annotations

import asyncio
import hmac

from mitmproxy import ctx, exceptions, http
from mitmproxy.addonmanager import Loader

from ssetape.addons.recorder import Recorder
from ssetape.recording.control import Command, ControlAnswer, ControlError, ControlRequest
from ssetape.recording.protocol import Counts
from ssetape.vocabulary import Header

__all__ = ["Control"]

CONTROL = "ssetape_control"  # flow.metadata: a control request whose secret was right
MIN_SECRET = 16
MAX_REQUEST = 4096  # bytes of a control request's body
POLL = 0.01  # seconds between two looks while settling


class Control:
    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self._secret = b""

    def load(self, loader: Loader) -> None:
        loader.add_option(
            "ssetape_control",
            str,
            "",
            f"A secret (at least {MIN_SECRET} characters): requests whose {Header.CONTROL} "
            "header holds it are control requests (the pytest plugin's), answered by the proxy "
            "itself and never forwarded nor recorded. Empty: off.",
        )

    def configure(self, updated: set[str]) -> None:
        if "ssetape_control" in updated:
            secret = ctx.options.ssetape_control
            if secret and len(secret) < MIN_SECRET:
                raise exceptions.OptionsError(
                    f"ssetape_control: a secret of at least {MIN_SECRET} characters"
                )
            self._secret = secret.encode()

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        given = flow.request.headers.get_all(Header.CONTROL)
        if not given:
            return
        # Never sent on nor stored, whatever happens: it may hold a secret.
        del flow.request.headers[Header.CONTROL]
        if not self._secret:
            return  # off: an ordinary request, without the header
        right = len(given) == 1 and hmac.compare_digest(given[0].encode(), self._secret)
        flow.metadata[CONTROL] = right

    async def request(self, flow: http.HTTPFlow) -> None:
        right = flow.metadata.pop(CONTROL, None)
        if right is None:
            return
        status, answer = 403, ControlAnswer(settled=False, error="not the control secret")
        if right:
            status, answer = await self._answer(flow.request)
        flow.response = http.Response.make(
            status, answer.to_json(), {"content-type": "application/json"}
        )

    async def _answer(self, req: http.Request) -> tuple[int, ControlAnswer]:
        raw = req.raw_content or b""
        try:
            if len(raw) > MAX_REQUEST:
                raise ControlError(f"a control request of {len(raw)} bytes")
            asked = ControlRequest.from_json(raw)
        except ControlError as e:
            return 400, ControlAnswer(settled=False, error=str(e))
        if asked.command is Command.SESSION:
            try:
                # Checked, then read by the recorder as each exchange begins.
                ctx.options.update(ssetape_session=asked.session)
            except exceptions.OptionsError as e:
                return 400, ControlAnswer(settled=False, error=str(e))
            return 200, self._totals(settled=True)
        return 200, await self._settle(asked.timeout)

    async def _settle(self, timeout: float) -> ControlAnswer:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            link = self.recorder.link
            settled = not self.recorder.inflight and (link is None or link.settled())
            if settled or loop.time() >= deadline:
                return self._totals(settled=settled)
            await asyncio.sleep(POLL)

    def _totals(self, *, settled: bool) -> ControlAnswer:
        link = self.recorder.link
        got = link.totals() if link is not None else Counts()
        return ControlAnswer(
            settled=settled,
            in_flight=len(self.recorder.inflight),
            exchanges_recorded=got.exchanges_recorded,
            events_recorded=got.events_recorded,
            exchanges_lost=got.exchanges_lost,
            events_lost=got.events_lost,
            store_errors=got.store_errors,
            last_error=got.last_error,
        )
