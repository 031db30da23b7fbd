"""Per-request accounting: counts, bytes, errors and latency of every S3 request.

Requests are keyed by (operation, bucket, caller AZ, bucket AZ). One table feeds both
outputs: prometheus collectors and a JSON-able snapshot for the cost model.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field
from typing import Any, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from ..histogram import Histogram
from .names import bucket_az

# Upper bounds in seconds; spans loopback (sub-ms) to S3 Standard tails and timeouts.
LATENCY_BUCKETS_S = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)
LABELS = ("operation", "bucket", "caller_az", "bucket_az")


@dataclass
class RequestStats:
    requests: int = 0
    errors: int = 0
    # Object payload: bytes uploaded by writes, bytes downloaded by reads.
    bytes: int = 0
    latency: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS_S))


class Accounting:
    def __init__(self, caller_az: str) -> None:
        self.caller_az = caller_az
        self._stats: dict[tuple[str, str, str, str], RequestStats] = {}
        # record() runs on the event loop, collect() on the metrics server's thread.
        self._lock = threading.Lock()

    def record(self, operation: str, bucket: str, *, nbytes: int, seconds: float, error: bool) -> None:
        key = (operation, bucket, self.caller_az, bucket_az(bucket))
        with self._lock:
            stats = self._stats.get(key)
            if stats is None:
                stats = self._stats[key] = RequestStats()
            stats.requests += 1
            stats.errors += error
            stats.bytes += nbytes
            stats.latency.observe(seconds)

    def rows(self) -> list[tuple[list[str], RequestStats]]:
        """A copy of every key's stats, sorted by key."""
        with self._lock:
            return [(list(key), dataclasses.replace(s, latency=s.latency.copy()))
                    for key, s in sorted(self._stats.items())]

    def snapshot(self) -> dict[str, Any]:
        """Every counter as plain JSON: one row per (operation, bucket, caller AZ, bucket AZ)."""
        rows = [{**dict(zip(LABELS, labels)), "requests": s.requests, "errors": s.errors,
                 "bytes": s.bytes, "latency_sum_s": s.latency.sum,
                 "latency_counts": s.latency.counts}
                for labels, s in self.rows()]
        return {"latency_buckets_s": list(LATENCY_BUCKETS_S), "requests": rows}

    def register(self, registry: CollectorRegistry) -> None:
        registry.register(_PrometheusCollector(self))


class _PrometheusCollector(Collector):
    def __init__(self, accounting: Accounting) -> None:
        self._accounting = accounting

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "kipper_objectstore_requests", "S3 requests sent, failed ones included", labels=LABELS)
        errors = CounterMetricFamily(
            "kipper_objectstore_errors", "S3 requests that failed", labels=LABELS)
        payload = CounterMetricFamily(
            "kipper_objectstore_bytes", "object bytes uploaded (writes) or downloaded (reads)", labels=LABELS)
        latency = HistogramMetricFamily(
            "kipper_objectstore_request_seconds", "S3 request latency, added profile delay included",
            labels=LABELS)
        for labels, stats in self._accounting.rows():
            requests.add_metric(labels, stats.requests)
            errors.add_metric(labels, stats.errors)
            payload.add_metric(labels, stats.bytes)
            stats.latency.add_to(latency, labels)
        yield from (requests, errors, payload, latency)
