"""The diskless engine's counters for /metrics and /metrics.json: WAL uploads and commits,
commit RPCs per WAL file, coordinator request latency, the coordinator log and SQLite
sizes, read-cache hit rate, garbage collection and merging."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from coordinator.diskless import BatchCoordinator, Housekeeping
from storage.diskless import ReadCache, WalWriter


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
                    yield GaugeMetricFamily(f"kipper_diskless_{group}_{name}",
                                            f"diskless {group}: {name.replace('_', ' ')}",
                                            value=value)
