"""The ``__consumer_offsets`` topic: which partition a group lives in, and its records.

A group belongs to partition ``abs(javaHashCode(group id)) % partitions`` as in Kafka, and
the broker leading that partition is the group's coordinator. Records are appended as
ordinary v2 batches through the partition's log, so they are replicated and recovered like
any classic topic, and replayed to rebuild the coordinator's state.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from kio.records.readers import read_batch
from kio.schema.errors import ErrorCode

from replication.partition import PartitionError
from protocol.records import build_batch, iter_batches
from storage.log import RecordTooLarge, StorageError

from .group_config import GroupConfig
from replication.cluster_metadata import BrokerInfo, MetadataImage

if TYPE_CHECKING:
    from replication.replica_manager import ReplicaManager

log = logging.getLogger(__name__)
OFFSETS_TOPIC = "__consumer_offsets"
_READ_BYTES = 1 << 20
# Group metadata and offset commits must wait for every in-sync replica, as in Kafka.
_ACKS_ALL = -1
# (name, partitions, replication factor, configs) -> outcome; Broker.create_topic.
TopicCreator = Callable[[str, int, int, dict[str, str]], Awaitable[ErrorCode]]


def java_string_hash(value: str) -> int:
    """Java's String.hashCode: over UTF-16 code units, wrapping at 32 bits, signed."""
    h = 0
    utf16 = value.encode("utf-16-be")
    for i in range(0, len(utf16), 2):
        h = (31 * h + (utf16[i] << 8 | utf16[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group_id: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode) % partitions`` (Utils.abs(MIN_VALUE) is 0)."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


class OffsetsStoreError(Exception):
    """An append to __consumer_offsets failed, with the error code a group client gets."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


def _client_error(error: Exception) -> ErrorCode:
    """Kafka's mapping of append errors to what a group's client should do about them."""
    if isinstance(error, PartitionError):
        if error.error_code == ErrorCode.not_leader_or_follower:
            return ErrorCode.not_coordinator
        return ErrorCode.coordinator_not_available
    if isinstance(error, RecordTooLarge):
        return ErrorCode.invalid_commit_offset_size
    return ErrorCode.not_coordinator  # KAFKA_STORAGE_ERROR: the log went offline here


class OffsetsStore:
    def __init__(self, node_id: int, image: MetadataImage, create_topic: TopicCreator,
                 replicas: "ReplicaManager", config: GroupConfig) -> None:
        self.node_id = node_id
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
        """The broker leading ``partition``, i.e. the coordinator of the groups in it."""
        topic = self.image.topics.get(OFFSETS_TOPIC)
        info = topic.partitions.get(partition) if topic else None
        return self.image.brokers.get(info.leader) if info else None

    def is_local_leader(self, partition: int) -> bool:
        """Whether this broker coordinates the groups of ``partition``."""
        hosted = self.replicas.partitions.get((OFFSETS_TOPIC, partition))
        return hosted is not None and hosted.is_leader

    def led_partitions(self) -> set[int]:
        return {p for p in range(self.num_partitions) if self.is_local_leader(p)}

    async def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]],
                     timestamp_ms: int) -> int:
        """Append records as one batch; return the offset of the last one."""
        batch = build_batch(list(records), timestamp_ms)
        try:
            target = self.replicas.get(OFFSETS_TOPIC, partition)
            result = await target.append_as_leader(batch, list(iter_batches(batch)), _ACKS_ALL)
        except (PartitionError, StorageError) as e:
            raise OffsetsStoreError(_client_error(e), str(e)) from e
        return result.last_offset

    async def replay(self, partition: int) -> AsyncIterator[tuple[int, bytes | None, bytes | None]]:
        """(offset, key, value) of every record in the partition, oldest first."""
        log_ = self.replicas.get(OFFSETS_TOPIC, partition).log
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
                            yield record.offset, record.key, record.value
                offset = header.next_offset
            if offset == progress:
                raise StorageError(f"{OFFSETS_TOPIC}-{partition}: no batch readable at {offset}")
