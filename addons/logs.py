"""The proxy's log: one format for every line, the instance's name, and the loss lines.

``ssetape_log_format`` (``text`` or ``json``, see ``recording.log_format``) and
``ssetape_name`` (``--name``; else ``HOST:PORT`` of the listening proxy) apply to every
line the proxy writes: ssetape's own, those its recording process sends up, and
mitmproxy's. mitmproxy writes them all through one handler on the root logger, its
``termlog`` addon's ``TermLogHandler`` (``termlog_verbosity`` sets its level); this addon
gives that handler the one formatter, as ``logging.Handler.setFormatter`` allows, and
changes nothing else of it (mitmproxy 11's ``mitmproxy/addons/termlog.py``).

While the proxy runs it looks at the recorder's link every :data:`SAMPLE_EVERY` seconds,
on the proxy's loop, and logs when events start being dropped or the recording process
stalls, and when that ends (``recording.loss_log``). It also tells the link the instance's
name for its run rows, once the proxy listens (a port 0 is chosen then).

Add it first: its ``configure`` then runs before any other addon logs, and its ``done``
ends the loss lines before the recorder's exit line.
"""

from __future__ import annotations

import asyncio
import logging
import time

from mitmproxy import ctx, exceptions
from mitmproxy.addonmanager import Loader
from mitmproxy.addons.termlog import TermLogHandler

from ssetape.addons.recorder import Recorder
from ssetape.recording.link import RecordLink
from ssetape.recording.log_format import LogLines, instance_name
from ssetape.recording.loss_log import LossLog
from ssetape.vocabulary import MAX_NAME, LogFormat, check_name

__all__ = ["SAMPLE_EVERY", "Logs"]

SAMPLE_EVERY = 0.5  # seconds between two looks at the link (as /healthz's samples)


class Logs:
    def __init__(self, recorder: Recorder | None = None) -> None:
        self.recorder = recorder
        self.lines = LogLines(instance_name(0))
        self.losses = LossLog()
        self._given = ""  # ssetape_name, checked
        self._port = 0  # where the proxy listens, once it does
        self._link: RecordLink | None = None  # the link the samples are of
        self._task: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        return self.lines.name

    def load(self, loader: Loader) -> None:
        loader.add_option(
            "ssetape_name",
            str,
            "",
            f"This instance's name (at most {MAX_NAME} printable characters, no spaces): in "
            "every log line and in its run rows (ssetape stats --runs). Empty: HOST:PORT of "
            "the listening proxy.",
        )
        loader.add_option(
            "ssetape_log_format",
            str,
            LogFormat.TEXT.value,
            "How log lines are written: text (date, level, ssetape[NAME], message) or json "
            "(one object per line: ts, level, name, logger, msg and the line's counts).",
            choices=[f.value for f in LogFormat],
        )

    def configure(self, updated: set[str]) -> None:
        if "ssetape_name" in updated:
            try:
                self._given = check_name(ctx.options.ssetape_name)
            except ValueError as e:
                raise exceptions.OptionsError(f"ssetape_name: {e}") from None
        if "ssetape_log_format" in updated:
            try:
                self.lines.form = LogFormat(ctx.options.ssetape_log_format)
            except ValueError:
                choices = ", ".join(f.value for f in LogFormat)
                raise exceptions.OptionsError(
                    f"ssetape_log_format: {ctx.options.ssetape_log_format!r} is not one of "
                    f"{choices}"
                ) from None
        self._rename(self._port or getattr(ctx.options, "listen_port", 0) or 0)
        for handler in logging.getLogger().handlers:
            if isinstance(handler, TermLogHandler) and handler.formatter is not self.lines:
                handler.setFormatter(self.lines)

    async def running(self) -> None:
        server = ctx.master.addons.get("proxyserver")
        addrs = server.listen_addrs() if server is not None else []
        if addrs:
            self._port = int(addrs[0][1])
        self._rename(self._port)
        self._sample()
        self._task = asyncio.get_running_loop().create_task(self._watch())

    def done(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self._sample()
        self._let_go("the proxy stops")

    def _rename(self, port: int) -> None:
        name = instance_name(port, self._given)
        if name != self.lines.name:
            self.lines.name = name
            if self._link is not None:
                self._link.rename(name)

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(SAMPLE_EVERY)
            self._sample()

    def _sample(self) -> None:
        link = self.recorder.link if self.recorder is not None else None
        if link is not self._link:  # the store changed (or recording began, or ended)
            self._let_go("the store changes")
            self._link = link
            if link is not None:
                link.rename(self.name)
        if link is not None:
            self.losses.sample(link.health(), link.totals().events_lost, time.monotonic())

    def _let_go(self, why: str) -> None:
        link = self._link
        if link is not None:
            self.losses.close(link.totals().events_lost, time.monotonic(), why)
