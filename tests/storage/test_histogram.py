"""storage.histogram: what it renders is a valid Prometheus histogram (cumulative buckets
ending in +Inf, which equals the count)."""

from __future__ import annotations

import pytest
from prometheus_client.core import HistogramMetricFamily

from storage.histogram import Histogram


def test_observations_render_as_cumulative_buckets():
    histogram = Histogram((0.1, 1.0))
    for value in (0.05, 0.1, 0.5, 2.0):
        histogram.observe(value)
    family = HistogramMetricFamily("x_seconds", "x", labels=["api"])
    histogram.add_to(family, ["PRODUCE"])
    buckets = {s.labels["le"]: s.value for s in family.samples if s.name == "x_seconds_bucket"}
    assert buckets == {"0.1": 2, "1.0": 3, "+Inf": 4}
    assert histogram.count == 4 and histogram.sum == pytest.approx(2.65)


def test_a_copy_does_not_move_with_the_original():
    histogram = Histogram()
    histogram.observe(0.01)
    copy = histogram.copy()
    histogram.observe(0.02)
    assert copy.count == 1 and histogram.count == 2
