"""A partition as this broker sees it: its log, its leadership, its high watermark.

The log (any engine) stores batches; the Partition decides what is committed. With the
broker as sole ISR member the high watermark follows the log end offset; replication
moves it with the followers' fetch positions.
"""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from coordinator.metadata import PartitionInfo
from protocol.records import BatchHeader
from storage.log import AppendResult, PartitionLog


class PartitionError(Exception):
    def __init__(self, error_code: ErrorCode, message: str = "") -> None:
        super().__init__(message or error_code.name)
        self.error_code = error_code


class Partition:
    def __init__(self, node_id: int, log: PartitionLog, info: PartitionInfo) -> None:
        self.node_id = node_id
        self.log = log
        self.topic = info.topic
        self.index = info.partition
        self._waiters: set[asyncio.Future] = set()
        self.update_info(info)
        self.high_watermark = log.log_end_offset if self.isr == [node_id] else log.log_start_offset

    def update_info(self, info: PartitionInfo) -> None:
        self.leader = info.leader
        self.leader_epoch = info.leader_epoch
        self.replicas = list(info.replicas)
        self.isr = list(info.isr)

    @property
    def is_leader(self) -> bool:
        return self.leader == self.node_id

    @property
    def last_stable_offset(self) -> int:
        # No transactions yet: everything below the high watermark is stable.
        return self.high_watermark

    def check_leader(self, current_leader_epoch: int = -1) -> None:
        """Raise the error Kafka gives a client that talks to the wrong replica or epoch."""
        if current_leader_epoch >= 0:
            if current_leader_epoch < self.leader_epoch:
                raise PartitionError(ErrorCode.fenced_leader_epoch)
            if current_leader_epoch > self.leader_epoch:
                raise PartitionError(ErrorCode.unknown_leader_epoch)
        if not self.is_leader:
            raise PartitionError(ErrorCode.not_leader_or_follower)

    async def append_as_leader(self, records: bytearray, batches: list[BatchHeader],
                               required_acks: int) -> AppendResult:
        self.check_leader()
        if required_acks == -1 and len(self.isr) < self.log.config.min_insync_replicas:
            raise PartitionError(
                ErrorCode.not_enough_replicas,
                f"ISR has {len(self.isr)} members, min.insync.replicas is "
                f"{self.log.config.min_insync_replicas}")
        result = await self.log.append(records, batches, self.leader_epoch)
        self.maybe_advance_high_watermark()
        return result

    def maybe_advance_high_watermark(self) -> None:
        if self.isr == [self.node_id]:
            new_hw = self.log.log_end_offset
        else:
            return
        if new_hw > self.high_watermark:
            self.high_watermark = new_hw
            self.notify_waiters()

    def notify_waiters(self) -> None:
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)

    def add_waiter(self, waiter: asyncio.Future) -> None:
        self._waiters.add(waiter)

    def remove_waiter(self, waiter: asyncio.Future) -> None:
        self._waiters.discard(waiter)
