"""Counters of the active-tiered engine on one broker, served under "active_tiered" in
/metrics.json and as kipper_active_tiered_* in /metrics. The object store's own accounting
counts the S3 requests behind them; the network counters count the fallback bytes again,
as cross-AZ replication."""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from typing import Any, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from ..histogram import Histogram


class ActiveTieredMetrics:
    def __init__(self) -> None:
        # Updated on the event loop, read by the metrics server's thread.
        self._lock = threading.Lock()
        self._by_bucket: Counter = Counter()  # (what, bucket) -> n
        self._by_scheme: Counter = Counter()  # (what, scheme) -> n
        self._totals: Counter = Counter()
        self._timings: dict[str, Histogram] = defaultdict(Histogram)

    def uploaded(self, bucket: str, nbytes: int, partitions: int) -> None:
        """One WAL object PUT to ``bucket``, holding ``partitions`` partitions' bytes."""
        with self._lock:
            self._by_bucket["uploads", bucket] += 1
            self._by_bucket["upload_bytes", bucket] += nbytes
            self._totals["uploaded_partition_ranges"] += partitions

    def downloaded(self, bucket: str, nbytes: int) -> None:
        with self._lock:
            self._by_bucket["downloads", bucket] += 1
            self._by_bucket["download_bytes", bucket] += nbytes

    def deleted(self, bucket: str, objects: int) -> None:
        with self._lock:
            self._by_bucket["deleted_objects", bucket] += objects

    def fallback(self, nbytes: int) -> None:
        """Raw records a leader sent a follower because no object covered them."""
        with self._lock:
            self._totals["fallback_bytes"] += nbytes
            self._totals["fallback_reads"] += 1

    def download_failed(self) -> None:
        with self._lock:
            self._totals["failed_downloads"] += 1

    def metadata(self, scheme: str, records: int, nbytes: int) -> None:
        """WAL metadata moved between brokers: pointer batches in fetch responses, records
        produced to and consumed from the metadata topic."""
        with self._lock:
            self._by_scheme["metadata_records", scheme] += records
            self._by_scheme["metadata_bytes", scheme] += nbytes

    def metadata_file(self, nbytes: int) -> None:
        """Bytes the ``fetch`` scheme appended to local metadata files."""
        with self._lock:
            self._by_scheme["metadata_file_bytes", "fetch"] += nbytes

    def timed(self, step: str, seconds: float) -> None:
        """One occurrence of a step of the acks=all path (see docs/active-tiered.md):
        upload_wait (first append to PUT start), put, publish, download, replicated (refs
        handed out until every in-sync follower fetched past them)."""
        with self._lock:
            self._timings[step].observe(seconds)

    def timings(self) -> dict[str, Histogram]:
        with self._lock:
            return {step: timing.copy() for step, timing in self._timings.items()}

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            result: dict[str, Any] = dict(self._totals)
            if self._timings:
                result["timings"] = {step: {"count": timing.count, "sum_s": timing.sum}
                                     for step, timing in self._timings.items()}
            for (what, bucket), n in self._by_bucket.items():
                result.setdefault(what, {})[bucket] = n
            for (what, scheme), n in self._by_scheme.items():
                result.setdefault(what, {})[scheme] = n
        return result

    def register(self, registry: CollectorRegistry) -> None:
        registry.register(_PrometheusCollector(self))


class _PrometheusCollector(Collector):
    def __init__(self, metrics: ActiveTieredMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        for name, value in sorted(self._metrics.snapshot().items()):
            if name == "timings":
                family = HistogramMetricFamily("kipper_active_tiered_step_seconds",
                                               "duration of each step of the acks=all path: "
                                               "upload_wait, put (upload), publish, download, "
                                               "replicated", labels=["step"])
                for step, timing in sorted(self._metrics.timings().items()):
                    timing.add_to(family, [step])
            elif isinstance(value, dict):
                label = "scheme" if name.startswith("metadata") else "bucket"
                family = CounterMetricFamily(f"kipper_active_tiered_{name}",
                                             f"active-tiered {name.replace('_', ' ')}",
                                             labels=[label])
                for key, n in sorted(value.items()):
                    family.add_metric([key], n)
            else:
                family = CounterMetricFamily(f"kipper_active_tiered_{name}",
                                             f"active-tiered {name.replace('_', ' ')}", value=value)
            yield family
