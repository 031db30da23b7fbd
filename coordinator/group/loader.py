"""Loading a ``__consumer_offsets`` partition (the replay of Kafka's group and offset
managers): the latest metadata of each group and the latest commit of each offset in it.
``coordinator.partition_loader`` decides when.

Offsets committed in a transaction (a transactional batch of the producer) stay pending
until the producer's marker: a commit marker makes them committed unless a later commit of
the same partition is, an abort marker drops them (Kafka's OffsetMetadataManager.replay and
replayEndTransactionMarker). A tombstone deletes an offset's pending commits too.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from protocol.records import NO_PRODUCER_ID

from ..coordinator_log import CoordinatorLog, LoggedMarker, LoggedRecord
from ..partition_loader import replay_into
from ..record_format import RecordReader
from ..share import group_records as share_group_records
from . import consumer_records
from .consumer_records import LoadedConsumerGroups
from .records import (
    GroupValue,
    MalformedGroupRecord,
    OffsetKey,
    decode_group_value,
    decode_key,
    decode_offset_value,
)
from .state import CommittedOffset, keep_later

log = logging.getLogger(__name__)
# (group id, topic, partition) of a committed offset.
OffsetSlot = tuple[str, str, int]


@dataclass(slots=True)
class LoadedPartition:
    """The latest metadata of each group and offset of each (group, topic, partition) in a
    partition's records, a tombstone deleting: the state machine (coordinator.state_machine)
    that loading replays the partition into."""

    partition: int
    groups: dict[str, GroupValue] = field(default_factory=dict)
    offsets: dict[OffsetSlot, CommittedOffset] = field(default_factory=dict)
    # Offsets of transactions without a marker yet, by producer id.
    pending: dict[int, dict[OffsetSlot, CommittedOffset]] = field(default_factory=dict)
    consumer_groups: LoadedConsumerGroups = field(default_factory=LoadedConsumerGroups)
    # Share groups (KIP-932): the share partitions each has state for.
    share_groups: dict[str, set[tuple[str, int]]] = field(default_factory=dict)
    next_offset: int = 0

    def apply(self, offset: int, record: LoggedRecord | LoggedMarker) -> None:
        self.next_offset = offset + 1
        if isinstance(record, LoggedMarker):
            self._end_transaction(record.producer_id, record.commit)
            return
        try:
            reader = RecordReader(record.key or b"", MalformedGroupRecord)
            version = reader.int16()
            if version in consumer_records.KEY_VERSIONS:
                self.consumer_groups.apply(consumer_records.decode_key(version, reader),
                                           record.value)
                return
            if version in share_group_records.KEY_VERSIONS:
                group_id = share_group_records.decode_group_id(reader)
                if record.value is None:
                    self.share_groups.pop(group_id, None)
                else:
                    self.share_groups[group_id] = share_group_records.decode_state_partitions(
                        record.value)
                return
            decoded = decode_key(record.key or b"")
            if isinstance(decoded, OffsetKey):
                slot = (decoded.group_id, decoded.topic, decoded.partition)
                if record.value is None:
                    self.offsets.pop(slot, None)
                    for pending in self.pending.values():
                        pending.pop(slot, None)
                    return
                v = decode_offset_value(record.value)
                committed = CommittedOffset(v.offset, v.leader_epoch, v.metadata,
                                            v.commit_timestamp, offset)
                if record.producer_id == NO_PRODUCER_ID:
                    self.offsets[slot] = committed
                else:
                    self.pending.setdefault(record.producer_id, {})[slot] = committed
            elif record.value is None:
                self.groups.pop(decoded.group_id, None)
            else:
                self.groups[decoded.group_id] = decode_group_value(record.value)
        except MalformedGroupRecord as e:
            log.warning("__consumer_offsets-%d offset %d: skipping record: %s", self.partition,
                        offset, e)

    def _end_transaction(self, producer_id: int, commit: bool) -> None:
        pending = self.pending.pop(producer_id, {})
        if commit:
            for slot, committed in pending.items():
                keep_later(self.offsets, slot, committed)


async def replay(topic_log: CoordinatorLog, partition: int) -> LoadedPartition:
    """The partition's records, replayed from its start."""
    loaded = await replay_into(topic_log, partition, LoadedPartition(partition))
    groups = (len(loaded.groups) + len(loaded.consumer_groups.groups)
              + len(loaded.share_groups))
    if groups or loaded.offsets:
        log.info("loaded %d groups and %d offsets of __consumer_offsets-%d", groups,
                 len(loaded.offsets), partition)
    return loaded
