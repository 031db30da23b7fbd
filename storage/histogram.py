"""A histogram of durations, cheap enough to observe on every request.

prometheus_client's Histogram takes a lock per observation and, with labels, a lookup under
another lock; everything that observes here runs on the broker's event loop, so a bisect and
two additions do (the object store's accounting, which may be read from another thread,
keeps its own lock around it). ``add_to`` renders one into a Prometheus histogram family.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from prometheus_client.core import HistogramMetricFamily

# Upper bounds in seconds: a request answered from memory (sub-ms) to long polls, S3
# Standard tails and timeouts.
DURATION_BUCKETS_S = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)


class Histogram:
    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float] = DURATION_BUCKETS_S) -> None:
        self.bounds = tuple(bounds)
        # Per bucket, not cumulative; the last one is +Inf.
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    def copy(self) -> Histogram:
        copy = Histogram(self.bounds)
        copy.counts, copy.sum = list(self.counts), self.sum
        return copy

    @property
    def count(self) -> int:
        return sum(self.counts)

    def add_to(self, family: HistogramMetricFamily, labels: Sequence[str] = ()) -> None:
        cumulative, buckets = 0, []
        for bound, n in zip([*map(str, self.bounds), "+Inf"], self.counts):
            cumulative += n
            buckets.append((bound, cumulative))
        family.add_metric(list(labels), buckets, self.sum)
