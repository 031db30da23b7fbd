"""Objects a read needed and did not find: data the logs say exists is gone from the store.

Nothing in kipper deletes an object a log still points to, so a missing one means data was
lost behind its back (a bucket lifecycle rule, a person, a store that forgot). Each object
is logged at ERROR once, with the partition that needed it, however often readers retry;
every read that finds one missing is counted (``kipper_objectstore_missing_object_reads``).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from typing import Any, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)
# Objects remembered as reported; past this many, one may be logged again (memory bound).
_REMEMBERED = 10_000


class MissingObjects:
    def __init__(self) -> None:
        # found() runs on the event loop, snapshot() on the metrics server's thread.
        self._lock = threading.Lock()
        self._reads: Counter = Counter()  # bucket -> reads that found an object missing
        self._reported: dict[tuple[str, str], None] = {}

    def found(self, bucket: str, key: str, partition: str) -> None:
        """A read for ``partition`` (topic-index) found ``bucket``/``key`` missing."""
        with self._lock:
            self._reads[bucket] += 1
            first = (bucket, key) not in self._reported
            if first:
                if len(self._reported) >= _REMEMBERED:
                    del self._reported[next(iter(self._reported))]
                self._reported[bucket, key] = None
        if first:
            log.error("object %s/%s, which holds data of %s, is missing from the object store: "
                      "those records are lost (reads of them fail; logged once per object)",
                      bucket, key, partition)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {"reads": dict(self._reads), "objects": len(self._reported)}

    def register(self, registry: CollectorRegistry) -> None:
        registry.register(_PrometheusCollector(self))


class _PrometheusCollector(Collector):
    def __init__(self, missing: MissingObjects) -> None:
        self._missing = missing

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "kipper_objectstore_missing_object_reads",
            "reads that found an object the logs point to missing (lost data)", labels=["bucket"])
        for bucket, n in sorted(self._missing.snapshot()["reads"].items()):
            family.add_metric([bucket], n)
        yield family
