"""A shared partition as this broker sees it (KIP-1183): a leader and no followers.

The leader's log makes each append durable in object storage and in the partition's stream
metadata before it returns (storage.shared), so the high watermark is simply that
committed end: acks=0, 1 and all alike wait for it (there is no copy short of object
storage worth acknowledging). The replicas are nominal, like a diskless partition's: they
are the brokers that may lead it, none of them fetches from another, and the controller
keeps every live one in the ISR (coordinator.controller). A new leader serves the
partition only once its log has reopened from object storage; until then clients get
NOT_LEADER_OR_FOLLOWER and retry.
"""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from protocol.records import BatchHeader
from storage.append_rules import AppendOrigin
from storage.log import AppendResult
from storage.shared import SharedLog
from storage.shared.state import NotCommitted

from .cluster_metadata import MetadataImage
from .partition import PartitionError, ReplicatedPartition


class SharedPartition(ReplicatedPartition):
    log: SharedLog

    @property
    def is_leader(self) -> bool:
        return self.leader == self.node_id and self.log.serving

    @property
    def high_watermark(self) -> int:
        if not self.is_leader:
            return self.log.log_start_offset
        return min(self.log.durable_end_offset(), self.log.log_end_offset)

    def check_epoch(self, current_leader_epoch: int) -> None:
        """Also for consumers' fetches, which Kafka lets read from followers (KIP-392): a
        replica that does not lead holds nothing to read."""
        super().check_epoch(current_leader_epoch)
        if not self.is_leader:
            raise PartitionError(ErrorCode.not_leader_or_follower)

    def maybe_advance_high_watermark(self) -> None:
        """The high watermark is the stream's committed end: nothing to compute."""

    async def append_as_leader(self, records: bytearray, batches: list[BatchHeader],
                               required_acks: int, timeout_s: float = 30.0,
                               origin: AppendOrigin = AppendOrigin.CLIENT) -> AppendResult:
        self.check_leader()
        try:
            async with asyncio.timeout(timeout_s if timeout_s > 0 else None):
                result = await self.log.append(records, batches, self.leader_epoch, origin)
        except TimeoutError:
            # The WAL object may still be committed: an idempotent producer's retry is then
            # recognised by its sequence numbers.
            raise PartitionError(ErrorCode.request_timed_out,
                                 f"not committed within the request's {timeout_s:g} s") from None
        except NotCommitted as e:
            if e.deposed:  # the client looks for the new leader
                raise PartitionError(ErrorCode.not_leader_or_follower, str(e)) from e
            raise
        self.log.on_high_watermark_updated(self.high_watermark)
        self.notify_waiters()  # consumers long-polling for the committed records
        return result

    def read_replicas(self, image: MetadataImage) -> list[int]:
        return [self.leader]

    def record_follower_fetch(self, replica_id: int, fetch_offset: int) -> bool:
        raise PartitionError(ErrorCode.not_leader_or_follower,
                             "shared partitions have no followers")

    def maybe_shrink_isr(self, max_lag_s: float) -> None:
        """The controller keeps the ISR (every live replica): nothing to shrink."""

    def maybe_expand_isr(self, max_lag_s: float) -> None:
        """Nor to expand."""

    def isr_settled(self) -> bool:
        return True
