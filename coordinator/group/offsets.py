"""Committed offsets of groups, as Kafka's OffsetMetadataManager keeps them: OffsetCommit,
TxnOffsetCommit, OffsetFetch, OffsetDelete, and the tombstones of a deleted group.

A commit is checked against the group's membership (``ClassicGroupManager``), written to
``__consumer_offsets`` and only then visible. A transactional commit (TxnOffsetCommit, a
producer's ``sendOffsetsToTransaction``) is written as a transactional batch of that producer
and stays pending, invisible to OffsetFetch, until the transaction coordinator's marker
reaches the partition: ``complete_transaction`` then commits or drops it. The service has
checked that this broker coordinates the group before any method here runs. kipper does
not expire committed offsets (Kafka's ``offsets.retention.minutes``) yet.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from .classic import ClassicGroupManager
from .consumer import ConsumerGroupManager
from .consumer_group import ConsumerGroup
from .loader import OffsetSlot
from ..coordinator_log import CoordinatorLog, CoordinatorLogError, LogRecord, TxnProducer
from .records import (
    OffsetKey,
    OffsetValue,
    encode_offset_key,
    encode_offset_value,
)
from .state import CONSUMER_PROTOCOL_TYPE, CommittedOffset, Group, GroupState, keep_later
from .timer import Timer

log = logging.getLogger(__name__)
TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    offset: int
    leader_epoch: int
    metadata: str


@dataclass(eq=False, slots=True)
class _TxnWrite:
    """A transactional commit being written. A marker of its producer that reaches the
    partition meanwhile ends its transaction: a producer ends a transaction only once its
    TxnOffsetCommit is answered, and a coordinator aborting one on timeout bumps the epoch,
    which refuses records that would come after the marker."""
    group_id: str
    producer_id: int
    # The marker's decision (True: commit), if one came.
    commit: bool | None = None


class OffsetManager:
    def __init__(self, classic: ClassicGroupManager, consumer: ConsumerGroupManager,
                 topic_log: CoordinatorLog, timer: Timer) -> None:
        self.classic = classic
        self.consumer = consumer
        self.topic_log = topic_log
        self.timer = timer
        # Producer id -> the groups it has pending offsets in (some may be gone since).
        self._open_transactions: dict[int, set[str]] = {}
        self._txn_writes: list[_TxnWrite] = []

    def _group(self, group_id: str) -> Group | ConsumerGroup | None:
        """The group of either protocol (an id names one group only)."""
        return self.consumer.groups.get(group_id) or self.classic.groups.get(group_id)

    def _group_or_new(self, group_id: str) -> Group | ConsumerGroup:
        """Offsets of a group nobody runs belong to a new, empty classic group (Kafka's
        "simple" group)."""
        return self._group(group_id) or self.classic.group_or_new(group_id)

    def restore(self, offsets: dict[OffsetSlot, CommittedOffset],
                pending: dict[int, dict[OffsetSlot, CommittedOffset]]) -> None:
        """Take over the offsets and open transactions' offsets a loaded partition holds."""
        for (group_id, topic, index), committed in offsets.items():
            self._group_or_new(group_id).offsets[(topic, index)] = committed
        for producer_id, slots in pending.items():
            for (group_id, topic, index), committed in slots.items():
                self._add_pending(self._group_or_new(group_id), producer_id,
                                  (topic, index), committed)

    def _add_pending(self, group: Group | ConsumerGroup, producer_id: int,
                     topic_partition: TopicPartition, committed: CommittedOffset) -> None:
        keep_later(group.pending_offsets.setdefault(producer_id, {}), topic_partition,
                   committed)
        self._open_transactions.setdefault(producer_id, set()).add(group.group_id)

    async def commit_offsets(self, group_id: str, generation_id: int, member_id: str,
                             group_instance_id: str | None,
                             offsets: dict[TopicPartition, OffsetCommit],
                             transaction: TxnProducer | None = None
                             ) -> dict[TopicPartition, ErrorCode]:
        """OffsetCommit, or with ``transaction`` TxnOffsetCommit: the offsets stay pending
        until ``complete_transaction``."""
        group = self._group(group_id)
        if group is None and generation_id >= 0:
            # A member of a generation this coordinator does not know (or no longer has).
            return dict.fromkeys(offsets, ErrorCode.illegal_generation)
        if isinstance(group, ConsumerGroup):
            # For a consumer group the "generation" is the member epoch.
            error = ConsumerGroupManager.commit_error(group, member_id, generation_id)
            if error is not None:
                return dict.fromkeys(offsets, error)
        else:
            if group is None:
                group = self.classic.group_or_new(group_id)
            error = self._commit_error(group, generation_id, member_id, group_instance_id,
                                       transactional=transaction is not None)
            if error is not None:
                self.classic.forget_if_unused(group)
                return dict.fromkeys(offsets, error)
            member = group.members.get(member_id)
            if member is not None and transaction is None:
                self.classic.expect_heartbeat(group, member, member.session_timeout_ms)
        now = self.timer.now_ms()
        records = [LogRecord(encode_offset_key(OffsetKey(group_id, topic, index)),
                                 encode_offset_value(OffsetValue(c.offset, c.leader_epoch,
                                                                 c.metadata, now)))
                   for (topic, index), c in offsets.items()]
        write = None if transaction is None else _TxnWrite(group_id, transaction.producer_id)
        if write is not None:
            self._txn_writes.append(write)
        try:
            last = await self.topic_log.append(self.topic_log.partition_for(group_id),
                                               records, now, transaction)
        except CoordinatorLogError as e:
            log.warning("committing offsets of group %s failed: %s", group_id, e)
            return dict.fromkeys(offsets, e.error_code)
        finally:
            if write is not None:
                self._txn_writes.remove(write)
        # The records are durable: whatever happened to the group meanwhile, memory
        # follows the log, as a reload would.
        target = self._group_or_new(group_id)
        for key, c in offsets.items():
            committed = CommittedOffset(c.offset, c.leader_epoch, c.metadata, now, last)
            if write is None or write.commit:
                keep_later(target.offsets, key, committed)
            elif write.commit is None:
                self._add_pending(target, write.producer_id, key, committed)
        return dict.fromkeys(offsets, ErrorCode.none)

    @staticmethod
    def _commit_error(group: Group, generation_id: int, member_id: str,
                      group_instance_id: str | None, transactional: bool) -> ErrorCode | None:
        """Kafka's ClassicGroup.validateOffsetCommit."""
        if group.in_state(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        if generation_id < 0 and group.in_state(GroupState.EMPTY):
            # The admin client, or a consumer that assigns its partitions itself.
            return None
        if generation_id >= 0 or member_id or group_instance_id is not None:
            if group.is_static_member_fenced(member_id, group_instance_id):
                return ErrorCode.fenced_instance_id
            if member_id not in group.members:
                return ErrorCode.unknown_member_id
            if generation_id != group.generation_id:
                return ErrorCode.illegal_generation
        elif not transactional:
            # Outside a generation only a group without members may commit ("simple" use);
            # TxnOffsetCommit before v3 carries no member id nor generation at all.
            return ErrorCode.unknown_member_id
        if group.in_state(GroupState.COMPLETING_REBALANCE) and not transactional:
            # The member knows the new generation but not yet its assignment.
            return ErrorCode.rebalance_in_progress
        return None

    def complete_transaction(self, partition: int, producer_id: int, commit: bool) -> None:
        """The producer's transaction marker is in ``partition``: its pending offsets in that
        partition's groups become committed (unless a later commit is) or are dropped."""
        for write in self._txn_writes:
            if (write.producer_id == producer_id
                    and self.topic_log.partition_for(write.group_id) == partition):
                write.commit = commit
        groups = self._open_transactions.get(producer_id, set())
        for group_id in [g for g in groups if self.topic_log.partition_for(g) == partition]:
            groups.discard(group_id)
            group = self._group(group_id)
            pending = group.pending_offsets.pop(producer_id, {}) if group is not None else {}
            if commit:
                for topic_partition, committed in pending.items():
                    keep_later(group.offsets, topic_partition, committed)
        if not groups:
            self._open_transactions.pop(producer_id, None)

    def fetch_offsets(self, group_id: str, partitions: list[TopicPartition] | None
                      ) -> dict[TopicPartition, CommittedOffset | None]:
        """Committed offsets of ``partitions`` (None: every partition the group has)."""
        group = self._group(group_id)
        committed = group.offsets if group is not None else {}
        if partitions is None:
            return dict(committed)
        return {tp: committed.get(tp) for tp in partitions}

    def pending_partitions(self, group_id: str) -> set[TopicPartition]:
        """The group's partitions with offsets of a transaction not decided yet."""
        group = self._group(group_id)
        return group.pending_partitions() if group is not None else set()

    async def delete_offsets(self, group_id: str, partitions: list[TopicPartition]
                             ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        group = self._group(group_id)
        if group is None:
            return ErrorCode.group_id_not_found, {}
        if isinstance(group, ConsumerGroup):
            subscribed = set(self.consumer.subscribed_topics(group))
        elif (not group.in_state(GroupState.EMPTY)
              and group.protocol_type != CONSUMER_PROTOCOL_TYPE):
            return ErrorCode.non_empty_group, {}
        else:
            # A consumer group with members keeps the offsets of the topics it consumes.
            subscribed = (set() if group.in_state(GroupState.EMPTY)
                          else group.subscribed_topics())
        results = {tp: ErrorCode.none if subscribed is not None and tp[0] not in subscribed
                   else ErrorCode.group_subscribed_to_topic for tp in partitions}
        # As Kafka, a pending transactional offset is deleted too (and stays so if its
        # transaction commits).
        stored = group.offset_partitions()
        removed = [tp for tp, e in results.items() if e == ErrorCode.none and tp in stored]
        if removed:
            write_error = await self.write_tombstones(group_id, removed)
            if write_error is not None:
                return write_error, {}
            for tp in removed:
                group.delete_offset(tp)
        return ErrorCode.none, results

    def group_offset_partitions(self, group_id: str) -> set[TopicPartition]:
        """Partitions with a committed or pending offset of the group."""
        group = self._group(group_id)
        return group.offset_partitions() if group is not None else set()

    async def write_tombstones(self, group_id: str, partitions: list[TopicPartition],
                               group_tombstones: list[LogRecord] = ()) -> ErrorCode | None:
        """Delete the offsets of ``partitions`` and, with ``group_tombstones``, the group's
        own records, in one batch."""
        records = [LogRecord(encode_offset_key(OffsetKey(group_id, topic, index)), None)
                   for topic, index in partitions]
        records += group_tombstones
        if not records:
            return None  # a share group with no offsets: nothing of it in the log
        try:
            await self.topic_log.append(self.topic_log.partition_for(group_id), records,
                                          self.timer.now_ms())
        except CoordinatorLogError as e:
            log.warning("deleting from group %s failed: %s", group_id, e)
            return e.error_code
        return None

