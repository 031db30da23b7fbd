"""What a Kafka operator alerts on, for /metrics (names in broker/metric_catalog.py):
request latency per API, bytes per topic, partition health, consumer-group lag, the event
loop's lag, the response bytes held for clients.

Counting is done where the work is (connections, handlers, the replica manager) with plain
integers and storage.histogram's histograms, never a lock or a label lookup under one;
whatever can be read from state (partition health, lag) is computed when /metrics is read.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from coordinator.controller import Controller
from coordinator.group.service import GroupCoordinator
from protocol.apis import ApiKey
from protocol.internal import InternalApiKey
from replication.cluster_metadata import METADATA_TOPIC, NO_LEADER, MetadataImage
from replication.fetch_session import FetchSessionCache
from replication.loop_slice import LoopSlice
from replication.node_client import NodeClient
from replication.partition import PartitionError, ReplicatedPartition
from replication.replica_manager import ReplicaManager
from storage.classic.open_files import SEGMENT_FILES
from storage.histogram import Histogram
from storage.log_cleaner import CleanerMetrics

from . import metric_catalog as catalog
from .response_memory import ResponseMemory
from .security.listener_security import AuthenticationFailures

log = logging.getLogger(__name__)
# How often the event loop's lag is sampled.
LOOP_PROBE_INTERVAL_S = 0.1
# How long a scrape waits for a partition leader's high watermark (consumer lag).
END_OFFSET_TIMEOUT_S = 2.0
# How long a walk over every partition for a scrape holds the event loop before it yields.
HEALTH_SLICE_S = 0.005


def api_name(api_key: int) -> str:
    for enum_type in (ApiKey, InternalApiKey):
        if api_key in enum_type._value2member_map_:
            return enum_type(api_key).name
    return str(api_key)


class RequestMetrics:
    """Latency per API of the requests this node's connections served."""

    def __init__(self) -> None:
        self._latency: dict[int, Histogram] = {}

    def observe(self, api_key: int, seconds: float) -> None:
        histogram = self._latency.get(api_key)
        if histogram is None:
            histogram = self._latency[api_key] = Histogram()
        histogram.observe(seconds)

    def collect(self) -> Iterator[Metric]:
        family = catalog.REQUEST_SECONDS.family()
        for api_key, histogram in sorted(self._latency.items()):
            histogram.add_to(family, [api_name(api_key)])
        yield family

    def snapshot(self) -> dict[str, Any]:
        return {api_name(api_key): {"count": histogram.count, "sum_s": histogram.sum}
                for api_key, histogram in sorted(self._latency.items())}


class TopicMetrics:
    """Record bytes and records per topic, counted by the Produce and Fetch handlers."""

    def __init__(self) -> None:
        self.bytes_in: Counter[str] = Counter()
        self.records_in: Counter[str] = Counter()
        self.bytes_out: Counter[str] = Counter()
        self.replication_bytes_out = 0

    def produced(self, topic: str, nbytes: int, records: int) -> None:
        self.bytes_in[topic] += nbytes
        self.records_in[topic] += records

    def fetched(self, topic: str, nbytes: int, by_replica: bool) -> None:
        if by_replica:
            self.replication_bytes_out += nbytes
        else:
            self.bytes_out[topic] += nbytes

    def collect(self) -> Iterator[Metric]:
        for spec, counts in ((catalog.TOPIC_BYTES_IN, self.bytes_in),
                             (catalog.TOPIC_RECORDS_IN, self.records_in),
                             (catalog.TOPIC_BYTES_OUT, self.bytes_out)):
            family = spec.family()
            for topic, n in sorted(counts.items()):
                family.add_metric([topic], n)
            yield family
        family = catalog.REPLICATION_BYTES_OUT.family()
        family.add_metric([], self.replication_bytes_out)
        yield family

    def snapshot(self) -> dict[str, Any]:
        return {"bytes_in": dict(self.bytes_in), "records_in": dict(self.records_in),
                "bytes_out": dict(self.bytes_out),
                "replication_bytes_out": self.replication_bytes_out}


@dataclass(frozen=True, slots=True)
class PartitionHealth:
    partitions: int
    leader_partitions: int
    under_replicated: int
    under_min_isr: int
    at_min_isr: int


async def partition_health(replicas: ReplicaManager) -> PartitionHealth:
    """Counted over the partitions this broker leads, as Kafka's leaders count them. The
    controller's metadata log, served as a partition, is not one (Kafka's is not either)."""
    turns = LoopSlice(HEALTH_SLICE_S)
    hosted = led = under_replicated = under_min_isr = at_min_isr = 0
    # A copy: the partitions may change between two turns.
    for (topic, _), p in list(replicas.partitions.items()):
        await turns.pause()
        if topic == METADATA_TOPIC:
            continue
        hosted += 1
        if not (isinstance(p, ReplicatedPartition) and p.is_leader):
            continue
        led += 1
        isr, min_isr = len(p.isr), p.log.config.min_insync_replicas
        under_replicated += isr < len(p.replicas)
        under_min_isr += isr < min_isr
        at_min_isr += isr == min_isr
    return PartitionHealth(hosted, led, under_replicated, under_min_isr, at_min_isr)


async def offline_partitions(image: MetadataImage) -> int:
    """Partitions without a live leader in the controller's image (Kafka's controller
    reports OfflinePartitionsCount, every other node 0)."""
    turns = LoopSlice(HEALTH_SLICE_S)
    live = {broker.node_id for broker in image.live_brokers()}
    offline = 0
    for topic in list(image.topics.values()):
        for info in list(topic.partitions.values()):
            await turns.pause()
            offline += info.leader == NO_LEADER or info.leader not in live
    return offline


@dataclass(frozen=True, slots=True)
class GroupLag:
    group: str
    topic: str
    partition: int
    committed_offset: int
    # None: the partition's high watermark could not be read.
    lag: int | None


class ConsumerLag:
    """Lag of the groups this broker coordinates, refreshed before each scrape: committed
    offsets are here, high watermarks are on the partitions' leaders (asked with ListOffsets
    when this broker does not lead the partition)."""

    def __init__(self, coordinator: Callable[[], GroupCoordinator | None],
                 replicas: Callable[[], ReplicaManager | None], image: MetadataImage,
                 nodes: NodeClient) -> None:
        self._coordinator = coordinator
        self._replicas = replicas
        self.image = image
        self.nodes = nodes
        self.rows: list[GroupLag] = []

    async def refresh(self) -> None:
        coordinator, replicas = self._coordinator(), self._replicas()
        if coordinator is None or replicas is None:
            return
        committed = [(group_id, topic, index, offset.offset)
                     for group_id, group in sorted(coordinator.groups.items())
                     for (topic, index), offset in sorted(group.offsets.items())]
        partitions = sorted({(topic, index) for _, topic, index, _ in committed})
        ends = dict(zip(partitions, await asyncio.gather(
            *(self._end_offset(replicas, topic, index) for topic, index in partitions))))
        self.rows = [GroupLag(group, topic, index, offset,
                              None if ends[topic, index] is None
                              else max(ends[topic, index] - offset, 0))
                     for group, topic, index, offset in committed]

    async def _end_offset(self, replicas: ReplicaManager, topic: str, index: int) -> int | None:
        local = replicas.partitions.get((topic, index))
        if local is not None and local.is_leader:
            return local.high_watermark
        topic_info = self.image.topics.get(topic)
        info = topic_info and topic_info.partitions.get(index)
        leader = info and self.image.brokers.get(info.leader)
        if leader is None:
            return None
        try:
            return await self.nodes.connection(leader.host, leader.port, "metrics").latest_offset(
                topic, index, END_OFFSET_TIMEOUT_S)
        except (PartitionError, OSError, TimeoutError) as e:
            log.debug("no high watermark of %s-%d for consumer lag: %s", topic, index, e)
            return None

    def collect(self) -> Iterator[Metric]:
        lag = catalog.CONSUMER_GROUP_LAG.family()
        committed = catalog.CONSUMER_GROUP_COMMITTED_OFFSET.family()
        for row in self.rows:
            labels = [row.group, row.topic, str(row.partition)]
            committed.add_metric(labels, row.committed_offset)
            if row.lag is not None:
                lag.add_metric(labels, row.lag)
        yield from (lag, committed)


class EventLoopLag:
    """How late the event loop wakes a timer: while it is late, no request is served."""

    def __init__(self) -> None:
        self.histogram = Histogram()

    async def probe(self) -> None:
        """Sample until cancelled."""
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + LOOP_PROBE_INTERVAL_S
            await asyncio.sleep(LOOP_PROBE_INTERVAL_S)
            self.histogram.observe(max(loop.time() - due, 0.0))


def unlabelled_families(values: dict[catalog.MetricSpec, float]) -> Iterator[Metric]:
    for spec, value in values.items():
        family = spec.family()
        family.add_metric([], value)
        yield family


@dataclass(eq=False)  # the registry keeps its collectors in a dict
class LogCleanerMetrics(Collector):
    """The log cleaner's counters and gauges (classic and active-tiered logs)."""

    cleaner: CleanerMetrics

    def register(self, registry: CollectorRegistry) -> None:
        registry.register(self)

    def values(self) -> dict[catalog.MetricSpec, float]:
        m = self.cleaner
        return {
            catalog.LOG_CLEANER_BYTES_READ: m.totals.bytes_read,
            catalog.LOG_CLEANER_BYTES_WRITTEN: m.totals.bytes_written,
            catalog.LOG_CLEANER_RECORDS_REMOVED: m.totals.records_removed,
            catalog.LOG_CLEANER_CLEANINGS: m.cleanings,
            catalog.LOG_CLEANER_FAILURES: m.failures,
            catalog.LOG_CLEANER_MAX_DIRTY_RATIO: m.max_dirty_ratio,
            catalog.LOG_CLEANER_MAX_COMPACTION_DELAY: m.max_compaction_delay_s,
            catalog.LOG_CLEANER_TIME_SINCE_LAST_RUN: m.time_since_last_run_s(),
            catalog.LOG_CLEANER_LAST_CLEAN_SECONDS: m.last_clean_s,
            catalog.LOG_CLEANER_BUFFER_UTILIZATION: m.last_buffer_utilization,
            catalog.LOG_CLEANER_RECOPY_RATIO: m.last_recopy_ratio,
        }

    def collect(self) -> Iterator[Metric]:
        yield from unlabelled_families(self.values())

    def snapshot(self) -> dict[str, Any]:
        return {spec.name.removeprefix("kipper_log_cleaner_"): value
                for spec, value in self.values().items()}


@dataclass(eq=False)  # the registry keeps its collectors in a dict
class BrokerMetrics(Collector):
    """This node's operator metrics as one /metrics source."""

    requests: RequestMetrics
    topics: TopicMetrics
    lag: ConsumerLag
    loop_lag: EventLoopLag
    response_memory: ResponseMemory
    connections: Callable[[], int]
    replicas: Callable[[], ReplicaManager | None]
    # This node's controller role, if it runs the controller.
    controller: Controller | None
    fetch_sessions: FetchSessionCache
    failed_authentications: AuthenticationFailures

    # What the walks over every partition found before the last scrape (refresh).
    _health: PartitionHealth | None = field(default=None, init=False)
    _offline: int = field(default=0, init=False)

    def register(self, registry: CollectorRegistry) -> None:
        registry.register(self)

    async def refresh(self) -> None:
        """The partition-health and offline-partition counts, walked in turns of the event
        loop before a scrape: the 20,000 partitions of a broker walked in one step held it
        for 40-50 ms on a loaded machine."""
        replicas = self.replicas()
        self._health = None if replicas is None else await partition_health(replicas)
        self._offline = (0 if self.controller is None
                         else await offline_partitions(self.controller.image))

    def _unlabelled(self) -> dict[catalog.MetricSpec, float]:
        values = {
            catalog.CONNECTIONS: self.connections(),
            catalog.FAILED_AUTHENTICATIONS: self.failed_authentications.count,
            catalog.RESPONSE_MEMORY_USED: self.response_memory.used,
            catalog.RESPONSE_MEMORY_LIMIT: self.response_memory.limit,
            catalog.ACTIVE_CONTROLLER: int(self.controller is not None and self.controller.active),
            catalog.OFFLINE_PARTITIONS: self._offline,
            catalog.FETCH_SESSIONS: len(self.fetch_sessions.sessions),
            catalog.FETCH_SESSION_EVICTIONS: self.fetch_sessions.evictions,
            catalog.OPEN_SEGMENT_FILES: len(SEGMENT_FILES),
            catalog.SEGMENT_FILES_CLOSED_IDLE: SEGMENT_FILES.closed_idle,
        }
        replicas, health = self.replicas(), self._health
        if replicas is not None and health is not None:  # None until the node has started
            values.update({
                catalog.PARTITIONS: health.partitions,
                catalog.LEADER_PARTITIONS: health.leader_partitions,
                catalog.UNDER_REPLICATED: health.under_replicated,
                catalog.UNDER_MIN_ISR: health.under_min_isr,
                catalog.AT_MIN_ISR: health.at_min_isr,
                catalog.ISR_SHRINKS: replicas.isr_changes.shrinks,
                catalog.ISR_EXPANDS: replicas.isr_changes.expands,
            })
        return values

    def collect(self) -> Iterator[Metric]:
        yield from unlabelled_families(self._unlabelled())
        family = catalog.EVENT_LOOP_LAG.family()
        self.loop_lag.histogram.add_to(family)
        yield family
        family = catalog.FETCH_REQUESTS.family()
        for kind, n in sorted(self.fetch_sessions.requests.items()):
            family.add_metric([kind], n)
        yield family
        yield from self.requests.collect()
        yield from self.topics.collect()
        yield from self.lag.collect()

    def snapshot(self) -> dict[str, Any]:
        return {
            **{spec.name.removeprefix("kipper_"): value
               for spec, value in self._unlabelled().items()},
            "requests": self.requests.snapshot(),
            "fetch_requests": dict(self.fetch_sessions.requests),
            "topics": self.topics.snapshot(),
            "consumer_group_lag": [
                {"group": row.group, "topic": row.topic, "partition": row.partition,
                 "committed_offset": row.committed_offset, "lag": row.lag}
                for row in self.lag.rows],
        }
