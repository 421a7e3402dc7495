"""Prometheus metrics of a recording proxy: ``GET /metrics`` on the admin server.

``ssetape_metrics`` (``ssetape record --metrics HOST:PORT``) names where; the admin server
(``addons.admin``) listens there too, on a thread of its own, never on the proxy's event loop:
at the ``ssetape_admin`` address, one listener answers ``/healthz``, ``/readyz`` and
``/metrics``; ``--metrics`` alone serves all three at its address. The metrics need the
optional extra ``ssetape[metrics]`` (prometheus-client); without it the option is refused in
one line naming the extra. ``ssetape.telemetry.metrics`` says what is measured and how.

Add it after the admin addon. It listens to the reports of the recorder's link (its
``Listeners``), attached again whenever the recorder has a new link (``ssetape_db``
changed): at each configure, at start and at each scrape.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mitmproxy import ctx, exceptions
from mitmproxy.addonmanager import Loader

from ssetape.addons.admin import Admin
from ssetape.addons.link_listener import LinkListener
from ssetape.addons.options import at_least
from ssetape.addons.recorder import Recorder
from ssetape.recording.protocol import Report

if TYPE_CHECKING:
    from ssetape.telemetry.metrics import RecorderMetrics

__all__ = ["EXTRA", "Metrics"]

EXTRA = "the metrics extra: pip install 'ssetape[metrics]' (prometheus-client)"
OPTIONS = ("ssetape_metrics", "ssetape_metrics_models", "ssetape_metrics_hosts")


class Metrics:
    def __init__(self, recorder: Recorder, admin: Admin) -> None:
        self.recorder = recorder
        self.admin = admin
        self.metrics: RecorderMetrics | None = None
        self._ear = LinkListener(self._hear)
        self._replayer: Any = None

    def load(self, loader: Loader) -> None:
        loader.add_option(
            "ssetape_metrics",
            str,
            "",
            "HOST:PORT (or PORT, on 127.0.0.1) to serve Prometheus metrics on, at /metrics "
            "(with /healthz and /readyz; the ssetape_admin address may be the same). Needs "
            "the metrics extra (prometheus-client). Empty: off.",
        )
        loader.add_option(
            "ssetape_metrics_models",
            int,
            20,
            "Models that get a label value of their own; the ones seen after that many are "
            "'other' (each value is a series in Prometheus).",
        )
        loader.add_option(
            "ssetape_metrics_hosts",
            bool,
            False,
            "Label the GenAI metrics with server_address and server_port (a series per host).",
        )

    def configure(self, updated: set[str]) -> None:
        if updated & set(OPTIONS):
            self._configure()
        self._attach()

    def _configure(self) -> None:
        value = ctx.options.ssetape_metrics.strip()
        top = at_least("ssetape_metrics_models", ctx.options.ssetape_metrics_models, 1)
        if not value:
            self.admin.listen("ssetape_metrics", "")
            self.admin.routes.pop("/metrics", None)
            self._detach()
            self.metrics = None
            return
        try:  # here: a proxy without --metrics needs no prometheus-client
            import ssetape.telemetry.metrics as telemetry
            import ssetape.telemetry.recorder_state as state
        except ImportError as e:
            if (e.name or "").partition(".")[0] != "prometheus_client":
                raise
            raise exceptions.OptionsError(f"ssetape_metrics: needs {EXTRA}") from None
        self.admin.listen("ssetape_metrics", value)  # first: a bad address changes nothing
        hosts = ctx.options.ssetape_metrics_hosts
        m = self.metrics
        if m is None or m.labels.top != top or m.labels.hosts != hosts:
            sources = state.Sources(
                link=lambda: self.recorder.link,
                in_flight=lambda: len(self.recorder.inflight),
                replays=self._replays,
            )
            self._detach()  # a new registry: its series start afresh
            self.metrics = telemetry.RecorderMetrics(sources, top_models=top, hosts=hosts)
        self.admin.routes["/metrics"] = self._render

    async def running(self) -> None:
        self._replayer = ctx.master.addons.get("replayer")
        self._attach()

    def done(self) -> None:
        self._detach()

    def _attach(self) -> None:
        """Hear the reports of the recorder's link (any thread)."""
        if self.metrics is not None:
            self._ear.follow(self.recorder.link)

    def _detach(self) -> None:
        self._ear.stop()

    def _hear(self, kind: Report, value: Any) -> None:  # on the link's reading thread
        metrics = self.metrics
        if metrics is not None:
            metrics.hear(kind, value)

    def _render(self, accept: str) -> tuple[bytes, str]:  # on the admin server's thread
        self._attach()
        metrics = self.metrics
        if metrics is None:
            return b"", "text/plain; charset=utf-8"
        return metrics.render(accept)

    def _replays(self) -> tuple[int, int] | None:
        r = self._replayer
        return (int(r.hits), int(r.misses)) if r is not None else None
