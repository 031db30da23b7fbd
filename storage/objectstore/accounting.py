"""Per-request accounting: counts, bytes, errors and latency of every S3 request.

Requests are keyed by (operation, bucket, caller AZ, bucket AZ). One table feeds both
outputs: prometheus collectors and a JSON-able snapshot for the cost model.
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass, field
from typing import Any, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

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
    latency_sum_s: float = 0.0
    # Per bucket of LATENCY_BUCKETS_S, not cumulative; the last one is +Inf.
    latency_counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS_S) + 1))


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
            stats.latency_sum_s += seconds
            stats.latency_counts[bisect.bisect_left(LATENCY_BUCKETS_S, seconds)] += 1

    def snapshot(self) -> dict[str, Any]:
        """Every counter as plain JSON: one row per (operation, bucket, caller AZ, bucket AZ)."""
        with self._lock:
            rows = [
                {
                    **dict(zip(LABELS, key)),
                    "requests": s.requests,
                    "errors": s.errors,
                    "bytes": s.bytes,
                    "latency_sum_s": s.latency_sum_s,
                    "latency_counts": list(s.latency_counts),
                }
                for key, s in sorted(self._stats.items())
            ]
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
        bounds = [str(b) for b in LATENCY_BUCKETS_S] + ["+Inf"]
        for row in self._accounting.snapshot()["requests"]:
            labels = [row[name] for name in LABELS]
            requests.add_metric(labels, row["requests"])
            errors.add_metric(labels, row["errors"])
            payload.add_metric(labels, row["bytes"])
            cumulative, buckets = 0, []
            for bound, count in zip(bounds, row["latency_counts"]):
                cumulative += count
                buckets.append((bound, cumulative))
            latency.add_metric(labels, buckets, row["latency_sum_s"])
        yield from (requests, errors, payload, latency)
