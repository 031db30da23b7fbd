"""``OffsetsLog`` over the broker's replicas of ``__consumer_offsets``.

Records are appended as ordinary v2 batches through the partition's log, so they are
replicated and recovered like any classic topic, and replayed to rebuild the coordinator's
state. This module needs only what ``OffsetsReplica`` and ``HostedReplicas`` declare of the
replica layer.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Protocol

from kio.records.readers import read_batch
from kio.schema.errors import ErrorCode

from protocol.records import BatchHeader, build_batch, iter_batches
from replication.cluster_metadata import BrokerInfo, MetadataImage
from replication.partition import PartitionError
from storage.log import AppendResult, PartitionLog, RecordTooLarge, StorageError

from .group.offsets_log import (
    LoggedRecord,
    OffsetsLog,
    OffsetsLogError,
    OffsetsRecord,
    partition_for,
)
from .group_config import GroupConfig

log = logging.getLogger(__name__)
OFFSETS_TOPIC = "__consumer_offsets"
_READ_BYTES = 1 << 20
# Group metadata and offset commits must wait for every in-sync replica, as in Kafka.
_ACKS_ALL = -1
# (name, partitions, replication factor, configs) -> outcome; ControllerChannel.create_topic.
TopicCreator = Callable[[str, int, int, dict[str, str]], Awaitable[ErrorCode]]


class OffsetsReplica(Protocol):
    """A hosted partition of ``__consumer_offsets``, as the replica layer's Partition is."""

    @property
    def is_leader(self) -> bool: ...

    @property
    def log(self) -> PartitionLog: ...

    async def append_as_leader(self, records: bytearray, batches: list[BatchHeader],
                               required_acks: int) -> AppendResult:
        """Raises PartitionError when this replica cannot take the append."""


class HostedReplicas(Protocol):
    """The partitions this broker hosts, as the replica layer's ReplicaManager keeps them."""

    @property
    def partitions(self) -> Mapping[tuple[str, int], OffsetsReplica]: ...


def _client_error(error: Exception) -> ErrorCode:
    """Kafka's mapping of append errors to what a group's client should do about them."""
    if isinstance(error, PartitionError):
        if error.error_code == ErrorCode.not_leader_or_follower:
            return ErrorCode.not_coordinator
        return ErrorCode.coordinator_not_available
    if isinstance(error, RecordTooLarge):
        return ErrorCode.invalid_commit_offset_size
    return ErrorCode.not_coordinator  # KAFKA_STORAGE_ERROR: the log went offline here


class OffsetsStore(OffsetsLog):
    """The broker's ``OffsetsLog``: the topic as the metadata image describes it, and the
    replicas of its partitions this broker hosts."""

    def __init__(self, image: MetadataImage, create_topic: TopicCreator,
                 replicas: HostedReplicas, config: GroupConfig) -> None:
        self.image = image
        self.create_topic = create_topic
        self.replicas = replicas
        self.config = config

    async def ensure_topic(self) -> None:
        """Create ``__consumer_offsets`` when a group first needs it, as Kafka does, so the
        brokers of a starting cluster are up and can all hold replicas."""
        if OFFSETS_TOPIC in self.image.topics:
            return
        replication_factor = min(self.config.offsets_topic_replication_factor,
                                 len(self.image.live_brokers()))
        error = await self.create_topic(
            OFFSETS_TOPIC, self.config.offsets_topic_num_partitions, replication_factor, {
                "kipper.storage.mode": "classic",
                # Kafka compacts this topic; kipper has no compaction yet, so nothing may
                # be deleted by time or size: the latest commit of a partition could be.
                "retention.ms": "-1",
                "segment.bytes": str(self.config.offsets_topic_segment_bytes),
            })
        if error == ErrorCode.none:
            log.info("created %s with %d partitions, replication factor %d", OFFSETS_TOPIC,
                     self.config.offsets_topic_num_partitions, replication_factor)
        elif error != ErrorCode.topic_already_exists:
            log.error("cannot create %s: %s", OFFSETS_TOPIC, error.name)

    @property
    def num_partitions(self) -> int:
        topic = self.image.topics.get(OFFSETS_TOPIC)
        return len(topic.partitions) if topic else self.config.offsets_topic_num_partitions

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def coordinator_node(self, partition: int) -> BrokerInfo | None:
        topic = self.image.topics.get(OFFSETS_TOPIC)
        info = topic.partitions.get(partition) if topic else None
        return self.image.brokers.get(info.leader) if info else None

    def is_local_leader(self, partition: int) -> bool:
        hosted = self.replicas.partitions.get((OFFSETS_TOPIC, partition))
        return hosted is not None and hosted.is_leader

    def led_partitions(self) -> set[int]:
        return {p for p in range(self.num_partitions) if self.is_local_leader(p)}

    def _replica(self, partition: int) -> OffsetsReplica:
        hosted = self.replicas.partitions.get((OFFSETS_TOPIC, partition))
        if hosted is None:
            # Like any other replica that cannot take the write: the client finds the
            # coordinator again.
            raise OffsetsLogError(ErrorCode.coordinator_not_available,
                                  f"{OFFSETS_TOPIC}-{partition} is not hosted here")
        return hosted

    async def append(self, partition: int, records: Sequence[OffsetsRecord],
                     timestamp_ms: int) -> int:
        batch = build_batch([(r.key, r.value) for r in records], timestamp_ms)
        target = self._replica(partition)
        try:
            result = await target.append_as_leader(batch, list(iter_batches(batch)), _ACKS_ALL)
        except (PartitionError, StorageError) as e:
            raise OffsetsLogError(_client_error(e), str(e)) from e
        return result.last_offset

    async def replay(self, partition: int) -> AsyncIterator[LoggedRecord]:
        log_ = self._replica(partition).log
        offset, end = log_.log_start_offset, log_.log_end_offset
        while offset < end:
            chunk = (await log_.read(offset, _READ_BYTES, max_offset=end)).records
            progress = offset
            for header in iter_batches(chunk, allow_partial_tail=True):
                if header.next_offset <= offset:
                    continue
                if header.compression or header.is_control:
                    log.warning("%s-%d: skipping batch at offset %d that kipper did not write",
                                OFFSETS_TOPIC, partition, header.base_offset)
                else:
                    batch, _ = read_batch(chunk, header.position)
                    for record in batch.records:
                        if record.offset >= offset:
                            yield LoggedRecord(record.offset, record.key, record.value)
                offset = header.next_offset
            if offset == progress:
                raise StorageError(f"{OFFSETS_TOPIC}-{partition}: no batch readable at {offset}")
