"""``CoordinatorLog`` over the broker's replicas of a coordinator's internal topic
(``__consumer_offsets`` for groups, ``__transaction_state`` for transactions).

Records are appended as ordinary v2 batches through the partition's log, so they are
replicated and recovered like any classic topic, and replayed to rebuild the coordinator's
state. This module needs only what ``HostedPartition`` and ``HostedReplicas`` declare of the
replica layer.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Protocol

from kio.records.readers import read_batch
from kio.schema.errors import ErrorCode

from protocol.records import (
    NO_PRODUCER_ID,
    TRANSACTIONAL_FLAG,
    BatchHeader,
    InvalidRecordBatch,
    build_batch,
    iter_batches,
    read_marker,
)
from replication.cluster_metadata import BrokerInfo, MetadataImage
from replication.partition import PartitionError
from storage.append_rules import AppendOrigin
from storage.log import AppendResult, PartitionLog, RecordTooLarge, StorageError
from storage.producer_state import ProducerStateError

from .coordinator_log import (
    CoordinatorLog,
    CoordinatorLogError,
    LoggedMarker,
    LoggedRecord,
    LogRecord,
    TxnProducer,
    partition_for,
)

log = logging.getLogger(__name__)
OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
# KIP-932: the share coordinator's log of share-partition state (coordinator.share).
SHARE_GROUP_STATE_TOPIC = "__share_group_state"
_READ_BYTES = 1 << 20
# Group metadata and offset commits must wait for every in-sync replica, as in Kafka.
_ACKS_ALL = -1
# (name, partitions, replication factor, configs) -> outcome; ControllerChannel.create_topic.
TopicCreator = Callable[[str, int, int, dict[str, str]], Awaitable[ErrorCode]]


class HostedPartition(Protocol):
    """A hosted partition of ``__consumer_offsets``, as the replica layer's Partition is."""

    @property
    def is_leader(self) -> bool: ...

    @property
    def log(self) -> PartitionLog: ...

    async def append_as_leader(self, records: bytearray, batches: list[BatchHeader],
                               required_acks: int, *, origin: AppendOrigin) -> AppendResult:
        """Raises PartitionError when this replica cannot take the append."""


class HostedReplicas(Protocol):
    """The partitions this broker hosts, as the replica layer's ReplicaManager keeps them."""

    @property
    def partitions(self) -> Mapping[tuple[str, int], HostedPartition]: ...


def _client_error(error: Exception) -> ErrorCode:
    """Kafka's mapping of append errors to what a group's client should do about them."""
    if isinstance(error, ProducerStateError):
        # A transactional append of a fenced producer epoch: the producer's own error.
        return error.error_code
    if isinstance(error, PartitionError):
        if error.error_code == ErrorCode.not_leader_or_follower:
            return ErrorCode.not_coordinator
        return ErrorCode.coordinator_not_available
    if isinstance(error, RecordTooLarge):
        return ErrorCode.invalid_commit_offset_size
    return ErrorCode.not_coordinator  # KAFKA_STORAGE_ERROR: the log went offline here


@dataclass(frozen=True, slots=True)
class InternalTopic:
    """A coordinator's topic as it is created: ``replication_factor`` is lowered to the
    live broker count, where Kafka would refuse until that many are up."""

    name: str
    num_partitions: int
    replication_factor: int
    segment_bytes: int


class InternalTopicLog(CoordinatorLog):
    """The broker's ``CoordinatorLog``: the topic as the metadata image describes it, and the
    replicas of its partitions this broker hosts."""

    def __init__(self, image: MetadataImage, create_topic: TopicCreator,
                 replicas: HostedReplicas, topic: InternalTopic) -> None:
        self.image = image
        self.create_topic = create_topic
        self.replicas = replicas
        self.topic = topic

    async def ensure_topic(self) -> None:
        """Create the topic when a coordinator is first looked up, as Kafka does, so the
        brokers of a starting cluster are up and can all hold replicas."""
        name = self.topic.name
        if name in self.image.topics:
            return
        replication_factor = min(self.topic.replication_factor, len(self.image.live_brokers()))
        error = await self.create_topic(name, self.topic.num_partitions, replication_factor, {
            "kipper.storage.mode": "classic",
            # As Kafka: the log cleaner keeps the latest record of each key (a group's
            # offsets, a transactional id's state), never retention.
            "cleanup.policy": "compact",
            "segment.bytes": str(self.topic.segment_bytes),
        })
        if error == ErrorCode.none:
            log.info("created %s with %d partitions, replication factor %d", name,
                     self.topic.num_partitions, replication_factor)
        elif error != ErrorCode.topic_already_exists:
            log.error("cannot create %s: %s", name, error.name)

    @property
    def num_partitions(self) -> int:
        topic = self.image.topics.get(self.topic.name)
        return len(topic.partitions) if topic else self.topic.num_partitions

    def partition_for(self, key: str) -> int:
        return partition_for(key, self.num_partitions)

    def coordinator_node(self, partition: int) -> BrokerInfo | None:
        topic = self.image.topics.get(self.topic.name)
        info = topic.partitions.get(partition) if topic else None
        return self.image.brokers.get(info.leader) if info else None

    def is_local_leader(self, partition: int) -> bool:
        hosted = self.replicas.partitions.get((self.topic.name, partition))
        return hosted is not None and hosted.is_leader

    def led_partitions(self) -> set[int]:
        return {p for p in range(self.num_partitions) if self.is_local_leader(p)}

    def coordinator_epoch(self, partition: int) -> int:
        topic = self.image.topics.get(self.topic.name)
        info = topic.partitions.get(partition) if topic else None
        return info.leader_epoch if info else -1

    def _replica(self, partition: int) -> HostedPartition:
        hosted = self.replicas.partitions.get((self.topic.name, partition))
        if hosted is None:
            # Like any other replica that cannot take the write: the client finds the
            # coordinator again.
            raise CoordinatorLogError(ErrorCode.coordinator_not_available,
                                  f"{self.topic.name}-{partition} is not hosted here")
        return hosted

    async def append(self, partition: int, records: Sequence[LogRecord], timestamp_ms: int,
                     transaction: TxnProducer | None = None) -> int:
        pairs = [(r.key, r.value) for r in records]
        if transaction is None:
            batch = build_batch(pairs, timestamp_ms)
        else:
            # Without sequence numbers, as Kafka's coordinator writes them: the partition
            # checks only the producer's epoch and transaction (AppendOrigin.COORDINATOR).
            batch = build_batch(pairs, timestamp_ms, producer_id=transaction.producer_id,
                                producer_epoch=transaction.producer_epoch,
                                attributes=TRANSACTIONAL_FLAG)
        target = self._replica(partition)
        try:
            result = await target.append_as_leader(batch, list(iter_batches(batch)), _ACKS_ALL,
                                                   origin=AppendOrigin.COORDINATOR)
        except (PartitionError, StorageError, ProducerStateError) as e:
            raise CoordinatorLogError(_client_error(e), str(e)) from e
        return result.last_offset

    async def replay(self, partition: int) -> AsyncIterator[LoggedRecord | LoggedMarker]:
        log_ = self._replica(partition).log
        offset = log_.log_start_offset
        # Up to the end as it is when the replay ends, not when it began: a marker written
        # while the partition loads (WriteTxnMarkers does not wait for the coordinator) is
        # replayed, and the loader takes the state over without yielding to the event loop
        # in between, so no marker falls between the replay and the loaded state.
        while offset < (end := log_.log_end_offset):
            chunk = (await log_.read(offset, _READ_BYTES, max_offset=end)).records
            progress = offset
            for header in iter_batches(chunk, allow_partial_tail=True):
                if header.next_offset <= offset:
                    continue
                if header.is_control:
                    marker = self._marker(partition, chunk, header)
                    if marker is not None:
                        yield marker
                elif header.compression:
                    log.warning("%s-%d: skipping batch at offset %d that kipper did not write",
                                self.topic.name, partition, header.base_offset)
                else:
                    producer_id = (header.producer_id if header.is_transactional
                                   else NO_PRODUCER_ID)
                    batch, _ = read_batch(chunk, header.position)
                    for record in batch.records:
                        if record.offset >= offset:
                            yield LoggedRecord(record.offset, record.key, record.value,
                                               producer_id)
                offset = header.next_offset
            if offset == progress:
                raise StorageError(f"{self.topic.name}-{partition}: no batch readable at {offset}")

    def _marker(self, partition: int, chunk: bytes, header: BatchHeader) -> LoggedMarker | None:
        try:
            marker = read_marker(chunk, header)
        except InvalidRecordBatch as e:
            log.warning("%s-%d: skipping control batch: %s", self.topic.name, partition, e)
            return None
        return LoggedMarker(header.base_offset, marker.producer_id, marker.commit)
