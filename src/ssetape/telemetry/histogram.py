"""A Prometheus histogram that also takes observations already counted per bucket.

prometheus_client's ``Histogram`` observes one value at a time. The recording process counts
an exchange's gaps per bucket itself (``recording.stored``), so that a stream of a million
events costs the proxy a few additions; this collector adds such counts, and observes single
values too. It yields a documented ``HistogramMetricFamily`` (cumulative ``le`` buckets, a
sum, a count) when scraped.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterator, Sequence

from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["BinnedHistogram"]


class BinnedHistogram(Collector):
    def __init__(
        self, name: str, documentation: str, labels: Sequence[str], bounds: Sequence[float]
    ) -> None:
        self.name, self.documentation = name, documentation
        self.labels = list(labels)
        self.bounds = tuple(bounds)
        self._lock = threading.Lock()
        # Per label values: the count in each bucket (one past the bounds: +Inf), and the sum.
        self._series: dict[tuple[str, ...], tuple[list[int], list[float]]] = {}

    def observe(self, labels: tuple[str, ...], value: float) -> None:
        counts = [0] * (len(self.bounds) + 1)
        counts[bisect_left(self.bounds, value)] = 1
        self.add(labels, counts, value)

    def add(self, labels: tuple[str, ...], counts: Sequence[int], total: float) -> None:
        """Observations counted per bucket (``le``: a bucket holds values up to its bound,
        inclusive; the last one, past every bound), and their sum."""
        if len(counts) != len(self.bounds) + 1 or not any(counts):
            return
        with self._lock:
            series = self._series.get(labels)
            if series is None:
                series = self._series[labels] = ([0] * len(counts), [0.0])
            buckets, s = series
            for i, n in enumerate(counts):
                buckets[i] += n
            s[0] += total

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labels)
        edges = [repr(float(b)) for b in self.bounds] + ["+Inf"]
        with self._lock:
            snapshot = [(k, list(b), s[0]) for k, (b, s) in self._series.items()]
        for labels, buckets, total in snapshot:
            running, cumulative = 0, []
            for edge, n in zip(edges, buckets, strict=True):
                running += n
                cumulative.append((edge, running))
            family.add_metric(list(labels), cumulative, total)
        yield family

    def describe(self) -> Iterator[Metric]:
        yield HistogramMetricFamily(self.name, self.documentation, labels=self.labels)
