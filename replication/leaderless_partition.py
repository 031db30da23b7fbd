"""A diskless partition as every broker sees it (KIP-1150): it has no leader of its own.

Any broker appends to it (through its WAL writer and the batch coordinator) and serves
reads of it, so to the request handlers each broker is its leader. The high watermark is
the coordinator's log end offset: a batch is readable as soon as it is committed.
"""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from protocol.records import BatchHeader
from storage.append_rules import AppendOrigin
from storage.log import AppendResult, NotCaughtUp, PartitionLog

from .cluster_metadata import DISKLESS_METADATA_TOPIC, BrokerInfo, MetadataImage, PartitionInfo
from .partition import Partition, PartitionError


def diskless_servers(image: MetadataImage) -> list[BrokerInfo]:
    """Live brokers that materialise the batch coordinator's state (replicas of its log),
    so they can answer reads; all live brokers before the log exists."""
    live = image.live_brokers()
    topic = image.topics.get(DISKLESS_METADATA_TOPIC)
    if topic is None or 0 not in topic.partitions:
        return live
    replicas = set(topic.partitions[0].replicas)
    return [b for b in live if b.node_id in replicas] or live


class LeaderlessPartition(Partition):
    def __init__(self, node_id: int, log: PartitionLog, info: PartitionInfo,
                 served_anywhere: bool = True) -> None:
        """``served_anywhere``: False while the partition still has records in a span of a
        leader-based mode (switched live from classic: docs/mode-switch.md), which only its
        replicas hold; consumers are then not sent to other brokers."""
        super().__init__(node_id, log, info)
        self.leader = node_id
        self.replicas = self.isr = [node_id]
        self.served_anywhere = served_anywhere
        self.update_info(info)

    def update_info(self, info: PartitionInfo) -> None:
        # Clients learn this epoch from Metadata and send it back; it only ever grows.
        self.leader_epoch = info.leader_epoch
        self.partition_epoch = info.partition_epoch
        self.sealed = info.switch_to is not None
        self.notify_waiters()

    @property
    def is_leader(self) -> bool:
        return True

    @property
    def high_watermark(self) -> int:
        return self.log.log_end_offset

    def check_epoch(self, current_leader_epoch: int) -> None:
        if current_leader_epoch > self.leader_epoch:
            raise PartitionError(ErrorCode.unknown_leader_epoch)

    async def catch_up(self, since: float) -> None:
        # The offsets come from this broker's copy of the batch coordinator's state, which
        # may not hold yet what another broker just had committed.
        try:
            await self.log.catch_up(since)
        except NotCaughtUp as e:
            # Retriable, and every client retries it on ListOffsets, Fetch and
            # DeleteRecords: it is what Kafka answers while a new leader's high watermark
            # is still catching up (KIP-207).
            raise PartitionError(ErrorCode.offset_not_available, str(e)) from e

    async def append_as_leader(self, records: bytearray, batches: list[BatchHeader],
                               required_acks: int, timeout_s: float = 30.0,
                               origin: AppendOrigin = AppendOrigin.CLIENT) -> AppendResult:
        # acks=0, 1 and all all wait for the commit: before it the batches have no offsets.
        # Within the request's timeout, as Kafka's acks=all: the upload and commit go on
        # and may still succeed (REQUEST_TIMED_OUT says "maybe"; an idempotent producer's
        # retry is then recognised by its sequence numbers).
        self.check_not_sealed()
        try:
            async with asyncio.timeout(timeout_s if timeout_s > 0 else None):
                return await self.log.append(records, batches, -1, origin)
        except TimeoutError:
            raise PartitionError(ErrorCode.request_timed_out,
                                 f"not committed within the request's {timeout_s:g} s") from None

    def read_replicas(self, image: MetadataImage) -> list[int]:
        if not self.served_anywhere:
            return [self.node_id]
        return [broker.node_id for broker in diskless_servers(image)]

    def record_follower_fetch(self, replica_id: int, fetch_offset: int) -> bool:
        raise PartitionError(ErrorCode.not_leader_or_follower,
                             "diskless partitions have no followers")
