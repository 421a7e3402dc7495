"""The recorder's health as a scrape finds it: read from its link when Prometheus asks.

The stored and lost counts are the link's totals (``RecordLink.totals``): the one ledger of
the recording processes, with what the proxy itself lost, each loss counted once, as the
exit line and the run rows count them. Nothing here counts anything a second time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ssetape.recording.link import RecordLink
from ssetape.recording.protocol import Counts

__all__ = ["RecorderState", "Sources"]


@dataclass(frozen=True, slots=True)
class Sources:
    """Where the state is read, on the scraping thread (each must be safe there)."""

    link: Callable[[], RecordLink | None]  # the recorder's, while it records
    in_flight: Callable[[], int]  # exchanges begun and not ended
    replays: Callable[[], tuple[int, int] | None]  # (hits, misses) if a replayer is loaded


def _totals(link: RecordLink) -> Counts:
    # Read off the proxy's loop: a recording process that dies just then may be let go of
    # between two reads (the next try sees it gone).
    for _ in range(3):
        try:
            return link.totals()
        except AttributeError:
            continue
    return Counts()


class RecorderState(Collector):
    def __init__(self, sources: Sources) -> None:
        self.sources = sources

    def collect(self) -> Iterator[Metric]:
        link = self.sources.link()
        if link is not None:
            yield from self._link(link)
        yield GaugeMetricFamily(
            "ssetape_streams_in_flight",
            "Exchanges the proxy relays now (begun, not ended).",
            value=self.sources.in_flight(),
        )
        replays = self.sources.replays()
        if replays is not None:
            hits, misses = replays
            yield CounterMetricFamily(
                "ssetape_replay_hits", "Requests answered from the tape.", value=hits
            )
            yield CounterMetricFamily(
                "ssetape_replay_misses",
                "Requests the tape had no recording for (a 404, or forwarded and recorded), "
                "and WebSocket client frames that differed from the recording.",
                value=misses,
            )

    @staticmethod
    def _link(link: RecordLink) -> Iterator[Metric]:
        t = _totals(link)
        for name, value, doc in (
            ("ssetape_recorded_exchanges", t.exchanges_recorded, "Exchange rows stored."),
            ("ssetape_recorded_events", t.events_recorded, "Event rows stored."),
            (
                "ssetape_lost_exchanges",
                t.exchanges_lost,
                "Exchanges relayed and not stored (the run rows' exchanges_lost).",
            ),
            (
                "ssetape_lost_events",
                t.events_lost,
                "Events relayed and not stored: dropped by the proxy or the store "
                "(the run rows' events_lost).",
            ),
            ("ssetape_store_errors", t.store_errors, "Store transactions that failed."),
            (
                "ssetape_recording_restarts",
                link.restarts,
                "Times the recording process died and was started again.",
            ),
        ):
            yield CounterMetricFamily(name, doc, value=value)
        health = link.health()
        yield GaugeMetricFamily(
            "ssetape_recording_process_up",
            "1 while the recording process runs with its store open.",
            value=int(health.running and health.ready),
        )
        yield GaugeMetricFamily(
            "ssetape_link_waiting_bytes",
            "Bytes handed to the recording process that its pipe has not taken yet.",
            value=health.waiting,
        )
        yield GaugeMetricFamily(
            "ssetape_link_bound_bytes",
            "Past this many waiting bytes, new chunks are dropped (and counted lost).",
            value=health.bound,
        )
