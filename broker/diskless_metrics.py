"""The diskless engine's metrics for /metrics and /metrics.json: WAL uploads and commits
(counts and latency), commit RPCs per WAL file, coordinator request latency, the coordinator
log and SQLite sizes, objects awaiting garbage collection, read-cache hits and download
latency, garbage collection and merging."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from coordinator.diskless import BatchCoordinator, Housekeeping
from storage.diskless import ReadCache, WalWriter
from storage.diskless.control_plane import StateStats

from . import metric_catalog as catalog

# The snapshot's numbers that are not counts of events: exported as gauges, the rest as
# counters (_total).
_GAUGES = {
    "wal": {"commit_rpcs_per_wal_file"},
    "coordinator": {*(f.name for f in dataclasses.fields(StateStats)), "db_bytes",
                    "applied_offset", "is_coordinator", "metadata_log_bytes",
                    "commit_latency_p50_ms", "commit_latency_p99_ms"},
    "read_cache": {"hit_rate", "bytes"},
}


class DisklessMetrics(Collector):
    def __init__(self, coordinator: BatchCoordinator, writer: WalWriter, cache: ReadCache,
                 housekeeping: Housekeeping) -> None:
        self.coordinator = coordinator
        self.writer = writer
        self.cache = cache
        self.housekeeping = housekeeping

    def snapshot(self) -> dict[str, Any]:
        wal = dataclasses.asdict(self.writer.stats)
        return {
            "wal": {**wal, "commit_rpcs_per_wal_file":
                    wal["commits"] / wal["uploads"] if wal["uploads"] else 0.0},
            "coordinator": self.coordinator.metrics(),
            "read_cache": {"hits": self.cache.hits, "misses": self.cache.misses,
                           "hit_rate": self.cache.hit_rate, "bytes": self.cache.size_bytes},
            "housekeeping": dataclasses.asdict(self.housekeeping.stats),
        }

    def register(self, registry: CollectorRegistry) -> None:
        registry.register(self)

    def collect(self) -> Iterator[Metric]:
        for group, values in self.snapshot().items():
            for name, value in values.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    kind = (GaugeMetricFamily if name in _GAUGES.get(group, ())
                            else CounterMetricFamily)
                    yield kind(f"kipper_diskless_{group}_{name}",
                               f"diskless {group}: {name.replace('_', ' ')}", value=value)
        for spec, histogram in ((catalog.DISKLESS_UPLOAD_SECONDS, self.writer.upload_seconds),
                                (catalog.DISKLESS_COMMIT_SECONDS, self.writer.commit_seconds),
                                (catalog.DISKLESS_DOWNLOAD_SECONDS, self.cache.download_seconds)):
            family = spec.family()
            histogram.add_to(family)
            yield family
